/*
 * charge.h - the /charge use case, charge_handle; its pure parts are in
 * charge_object.h.
 */
#ifndef CHARGE_CHARGE_H
#define CHARGE_CHARGE_H

#include "charge_object.h"
#include "exchange.h"
#include "validate.h"

/*
 * The /charge use case: check, fingerprint, claim, provider, spill, record,
 * replay, as a small state machine whose waits are callbacks. Fills
 * x->resp (always: errors become problems) and finishes the exchange.
 */
void charge_handle(struct exchange *x);

#endif
