/*
 * config_print.c - the effective configuration as --check-config prints it:
 * one "key = value" line per row of cfg_rows[], secrets masked.
 */
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "config_print.h"
#include "log.h"

#define CONF_MASK "********" /* printed instead of secrets */

/* Prints url with the password of redis://user:password@ masked. */
static int
cfg_print_url(const char *url, FILE *f)
{
	const char *auth, *at, *colon;

	auth = strstr(url, "://");
	if (auth == NULL || strncmp(url, "redis", 5) != 0)
		return fprintf(f, "%s", url);
	auth += 3;
	at = strrchr(auth, '@');
	if (at == NULL)
		return fprintf(f, "%s", url);
	colon = memchr(auth, ':', (size_t)(at - auth));
	if (colon == NULL)
		/* "redis://secret@host": the one field may be a password. */
		return fprintf(f, "%.*s%s%s", (int)(auth - url), url, CONF_MASK,
		    at);
	return fprintf(f, "%.*s%s%s", (int)(colon + 1 - url), url, CONF_MASK,
	    at);
}

void
config_print(const struct config *cfg, FILE *f)
{
	const char *s;
	size_t i;
	int lvl;

	for (i = 0; i < CFG_NROWS; i++) {
		const struct cfg_row *r = &cfg_rows[i];

		if (fprintf(f, "%s = ", r->name) < 0)
			return;
		switch (r->type) {
		case CFG_INT:
		case CFG_LONG:
			if (fprintf(f, "%ld", cfg_num(cfg, r)) < 0)
				return;
			break;
		case CFG_LOG_LEVEL:
			lvl = (int)cfg_num(cfg, r);
			if (fprintf(f, "%s", log_level_name(lvl)) < 0)
				return;
			break;
		case CFG_URL:
			if (cfg_print_url(cfg_cstr(cfg, r), f) < 0)
				return;
			break;
		case CFG_STRING:
		case CFG_PATH:
			s = cfg_cstr(cfg, r);
			if ((r->flags & CFG_F_SECRET) && s[0] != '\0')
				s = CONF_MASK;
			if (fprintf(f, "%s", s) < 0)
				return;
			break;
		}
		if (fputc('\n', f) == EOF)
			return;
	}
}
