/*
 * config_load.h - the configuration from its sources: conf/charge.conf
 * ("key = value", '#' comments), then CHARGE_<KEY> in the environment,
 * then config_validate(). Pure but for config_load(), which reads the file.
 */
#ifndef CHARGE_CONFIG_LOAD_H
#define CHARGE_CONFIG_LOAD_H

#include <stddef.h>

#include "config.h"

/*
 * Applies "key = value" lines from text[0..len) to c. Relative paths are
 * resolved against c->conf_dir. Returns 0, or -1 with errstr naming the key
 * (or the line number for syntax errors).
 */
int config_parse_text(struct config *cfg, const char *text, size_t len,
    char *errstr, size_t errlen);

/* Applies CHARGE_<KEY>=value entries of envp (NULL-terminated). 0 or -1. */
int config_apply_env(struct config *cfg, char *const *envp, char *errstr,
    size_t errlen);

/*
 * Loads defaults, the file at path (CHARGE_CONF, else the compiled-in
 * project path), the environment, then validates. 0 or -1 with errstr.
 */
int config_load(struct config *cfg, const char *path, char *const *envp,
    char *errstr, size_t errlen);

/* The configuration file to use: $CHARGE_CONF or the compiled-in default. */
const char *config_default_path(char *const *envp);

#endif
