/*
 * fuzz.h - the targets of the one fuzz binary (tests/fuzz/run.sh builds
 * fuzz.c with every target and picks one per run with FUZZ_TARGET). Each
 * takes one input and returns; a broken invariant aborts.
 */
#ifndef CHARGE_FUZZ_H
#define CHARGE_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* fuzz_parsers.c: JSON, the charge body, headers, records, Redis, FastCGI */
void fuzz_parsers(const uint8_t *data, size_t size);
/* fuzz_sim.c: charge-provider-sim's form, chains and data file */
void fuzz_sim(const uint8_t *data, size_t size);
/* fuzz_http1.c: the provider client's answer reader and CONNECT answer */
void fuzz_http1(const uint8_t *data, size_t size);
/* fuzz_wire.c: the provider's charge (against cJSON), list and error */
void fuzz_wire(const uint8_t *data, size_t size);
/* fuzz_sig.c: Stripe-Signature against an HMAC made here */
void fuzz_sig(const uint8_t *data, size_t size);
/* fuzz_rc.c: charge-reconcile's list page, charge and times */
void fuzz_rc(const uint8_t *data, size_t size);

/* A copy of data[0..size) with a NUL after it (malloc'd), or NULL. */
char *fuzz_cstr(const uint8_t *data, size_t size);

#endif
