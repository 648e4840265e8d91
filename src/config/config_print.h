/*
 * config_print.h - the effective configuration, as --check-config prints
 * it.
 */
#ifndef CHARGE_CONFIG_PRINT_H
#define CHARGE_CONFIG_PRINT_H

#include <stdio.h>

#include "config.h"

/* Prints every key and its effective value (secrets masked). */
void config_print(const struct config *cfg, FILE *f);

#endif
