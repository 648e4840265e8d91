/*
 * config_load.c - where the configuration comes from: "key = value" text
 * (conf/charge.conf), CHARGE_<KEY> in the environment, and the order
 * config_load() applies them in before config_validate().
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "config_load.h"
#include "log.h"
#include "util.h"

#ifndef CHARGE_DEFAULT_CONF
#define CHARGE_DEFAULT_CONF "conf/charge.conf"
#endif

#define CONF_FILE_MAX (1024 * 1024) /* bytes; a real file is a few KiB */
#define CONF_ENV_PREFIX "CHARGE_"
#define CONF_ENV_FILE "CHARGE_CONF"
#define CONF_NAME_MAX 64 /* bytes of a key name */
/* bytes of CHARGE_<KEY> */
#define CONF_ENV_NAME_MAX (sizeof(CONF_ENV_PREFIX) - 1 + CONF_NAME_MAX)
#define CONF_ENV_SUGGEST_MAX 3 /* edits from a key to name it in an error */
#define CONF_ROWS_MAX 128      /* rows one source may set (cfg_nrows) */

/*
 * The "<key>_file" rows one source (the file, or the environment) set,
 * applied once the source is read: given[i] says it set cfg_rows[i]. A
 * key and its _file (a path, not "" or "none") both set: an error; the
 * key alone: an earlier source's _file is dropped; the _file alone: the
 * key read from it.
 */
static int
cfg_secret_files(struct config *cfg, const unsigned char *given, char *errstr,
    size_t errlen)
{
	char why[CONF_WHY_MAX];
	size_t i, n, len;
	char *text = NULL;
	int rc, from_file;

	for (i = 0; i < CFG_NROWS && i < CONF_ROWS_MAX; i++) {
		const struct cfg_row *f = &cfg_rows[i], *k;
		char *path = (char *)cfg + f->off;

		if (!(f->flags & CFG_F_SECRET_FILE))
			continue;
		n = strlen(f->name) - strlen(CFG_FILE_SUFFIX);
		if ((k = cfg_row_find(f->name, n)) == NULL)
			continue; /* the table is checked by test_config */
		from_file =
		    given[i] && path[0] != '\0' && strcmp(path, "none") != 0;
		if (from_file && given[k - cfg_rows]) {
			util_err(errstr, errlen,
			    "%s and %s are both set: keep one (the value, or the file that holds it)",
			    k->name, f->name);
			return -1;
		}
		if (given[k - cfg_rows])
			path[0] = '\0';
		if (!from_file)
			continue;
		if (util_read_file(path, k->size + 2, &text, &len, why,
		        sizeof(why)) != 0) {
			util_err(errstr, errlen, "%s: %s", f->name, why);
			return -1;
		}
		/* one trailing newline, as echo and editors leave it */
		if (len > 0 && text[len - 1] == '\n')
			len--;
		if (len > 0 && text[len - 1] == '\r')
			len--;
		rc = cfg_set(cfg, k, text, len, why, sizeof(why));
		explicit_bzero(text, len);
		free(text);
		text = NULL;
		if (rc != 0) {
			util_err(errstr, errlen, "%s (%s): %s", f->name, path,
			    why);
			return -1;
		}
	}
	return 0;
}

/* config_parse_text() with name ("path:N: ") or NULL ("line N: "). */
static int
cfg_parse(struct config *cfg, const char *name, const char *text, size_t len,
    char *err, size_t errlen)
{
	char why[CONF_WHY_MAX], key[CONF_NAME_MAX];
	char where[PATH_MAX_LEN + 32];
	unsigned char given[CONF_ROWS_MAX] = { 0 };
	const struct cfg_row *r;
	struct util_lines it;
	const char *line, *k, *v;
	size_t ll, i, klen, vstart, vend;
	int got;

	util_lines_init(&it, text, len);
	while ((got = util_lines_next(&it, &line, &ll)) != 0) {
		if (name != NULL)
			(void)snprintf(where, sizeof(where), "%s:%zu", name,
			    it.lineno);
		else
			(void)snprintf(where, sizeof(where), "line %zu",
			    it.lineno);
		if (got < 0) {
			util_err(err, errlen, "%s: NUL byte", where);
			return -1;
		}
		i = 0;
		k = line;
		for (klen = 0; i < ll && !util_is_space(line[i]) &&
		     line[i] != '=' && line[i] != '#';
		     i++)
			klen++;
		for (; i < ll && util_is_space(line[i]); i++)
			;
		if (klen == 0 || i == ll || line[i] != '=') {
			util_err(err, errlen, "%s: expected 'key = value'",
			    where);
			return -1;
		}
		for (i++; i < ll && util_is_space(line[i]); i++)
			;
		vstart = i;
		/* A '#' after whitespace starts a comment; "a#b" is a value. */
		for (vend = vstart; vend < ll; vend++)
			if (line[vend] == '#' &&
			    (vend == vstart || util_is_space(line[vend - 1])))
				break;
		while (vend > vstart && util_is_space(line[vend - 1]))
			vend--;
		v = line + vstart;

		r = cfg_row_find(k, klen);
		if (r == NULL) {
			(void)log_escape(key, sizeof(key), k, klen);
			util_err(err, errlen, "%s: unknown key '%s'", where,
			    key);
			return -1;
		}
		if (cfg_set(cfg, r, v, vend - vstart, why, sizeof(why)) != 0) {
			util_err(err, errlen, "%s: %s", where, why);
			return -1;
		}
		if ((size_t)(r - cfg_rows) < CONF_ROWS_MAX)
			given[r - cfg_rows] = 1;
	}
	return cfg_secret_files(cfg, given, err, errlen);
}

int
config_parse_text(struct config *cfg, const char *text, size_t len,
    char *errstr, size_t errlen)
{
	return cfg_parse(cfg, NULL, text, len, errstr, errlen);
}

/* Edit distance of a and b (bytes); CONF_ENV_NAME_MAX for longer names. */
static size_t
cfg_distance(const char *a, size_t an, const char *b, size_t bn)
{
	size_t row[CONF_ENV_NAME_MAX + 1], i, j, diag, up;

	if (an > CONF_ENV_NAME_MAX || bn > CONF_ENV_NAME_MAX)
		return CONF_ENV_NAME_MAX;
	for (j = 0; j <= bn; j++)
		row[j] = j;
	for (i = 1; i <= an; i++) {
		diag = row[0];
		row[0] = i;
		for (j = 1; j <= bn; j++) {
			up = row[j];
			row[j] = diag + (a[i - 1] != b[j - 1]);
			if (up + 1 < row[j])
				row[j] = up + 1;
			if (row[j - 1] + 1 < row[j])
				row[j] = row[j - 1] + 1;
			diag = up;
		}
	}
	return row[bn];
}

/* CHARGE_<KEY> of a row, in var (CONF_ENV_NAME_MAX + 1 bytes); its length. */
static size_t
cfg_env_name(const struct cfg_row *r, char *var)
{
	size_t n = strlen(CONF_ENV_PREFIX), j;

	memcpy(var, CONF_ENV_PREFIX, n);
	for (j = 0; r->name[j] != '\0' && n < CONF_ENV_NAME_MAX; j++)
		var[n++] = (r->name[j] >= 'a' && r->name[j] <= 'z')
		    ? (char)(r->name[j] - 'a' + 'A')
		    : r->name[j];
	var[n] = '\0';
	return n;
}

/*
 * -1 and errstr for a CHARGE_ variable that names no key (CHARGE_CONF,
 * the file's path, aside): a typo must not leave a setting at its default
 * unnoticed, as an unknown key in the file does not.
 */
static int
cfg_env_unknown(char *const *envp, char *errstr, size_t errlen)
{
	char var[CONF_ENV_NAME_MAX + 1], best[CONF_ENV_NAME_MAX + 1];
	char shown[CONF_WHY_MAX];
	size_t pre = strlen(CONF_ENV_PREFIX), i, n, d, best_d;
	char *const *e;
	const char *eq;

	for (e = envp; *e != NULL; e++) {
		if (strncmp(*e, CONF_ENV_PREFIX, pre) != 0 ||
		    (eq = strchr(*e, '=')) == NULL)
			continue;
		n = (size_t)(eq - *e);
		if (n == strlen(CONF_ENV_FILE) &&
		    strncmp(*e, CONF_ENV_FILE, n) == 0)
			continue;
		best_d = CONF_ENV_NAME_MAX;
		best[0] = '\0';
		for (i = 0; i < CFG_NROWS; i++) {
			size_t vn = cfg_env_name(&cfg_rows[i], var);

			if (vn == n && strncmp(*e, var, n) == 0)
				break;
			d = cfg_distance(*e + pre, n - pre, var + pre,
			    vn - pre);
			if (d < best_d) {
				best_d = d;
				memcpy(best, var, vn + 1);
			}
		}
		if (i < CFG_NROWS)
			continue;
		(void)log_escape(shown, sizeof(shown), *e, n);
		if (best_d <= CONF_ENV_SUGGEST_MAX)
			util_err(errstr, errlen,
			    "%s: not a configuration key (did you mean %s?)",
			    shown, best);
		else
			util_err(errstr, errlen,
			    "%s: not a configuration key (charge --check-config lists them)",
			    shown);
		return -1;
	}
	return 0;
}

int
config_apply_env(struct config *cfg, char *const *envp, char *errstr,
    size_t errlen)
{
	char var[CONF_ENV_NAME_MAX + 1];
	char why[CONF_WHY_MAX];
	unsigned char given[CONF_ROWS_MAX] = { 0 };
	size_t i, n;
	char *const *e;

	if (envp == NULL)
		return 0;
	if (cfg_env_unknown(envp, errstr, errlen) != 0)
		return -1;
	for (i = 0; i < CFG_NROWS; i++) {
		const struct cfg_row *r = &cfg_rows[i];

		n = cfg_env_name(r, var);
		/* The first match wins, as with getenv(3). */
		for (e = envp; *e != NULL; e++)
			if (strncmp(*e, var, n) == 0 && (*e)[n] == '=')
				break;
		if (*e == NULL)
			continue;
		if (cfg_set(cfg, r, *e + n + 1, strlen(*e + n + 1), why,
		        sizeof(why)) != 0) {
			util_err(errstr, errlen, "%s: %s", var, why);
			return -1;
		}
		if (i < CONF_ROWS_MAX)
			given[i] = 1;
	}
	return cfg_secret_files(cfg, given, errstr, errlen);
}

int
config_load(struct config *cfg, const char *path, char *const *envp,
    char *errstr, size_t errlen)
{
	char dir[PATH_MAX_LEN];
	const char *slash;
	char *real = NULL, *text = NULL;
	size_t len = 0, dlen;
	int rc = -1;

	if (path == NULL)
		path = config_default_path(envp);
	slash = strrchr(path, '/');
	if (slash == NULL) {
		dir[0] = '.';
		dir[1] = '\0';
	} else {
		dlen = slash == path ? 1 : (size_t)(slash - path);
		if (dlen >= sizeof(dir)) {
			util_err(errstr, errlen, "%s: path too long", path);
			goto fail;
		}
		memcpy(dir, path, dlen);
		dir[dlen] = '\0';
	}
	real = realpath(dir, NULL);
	if (real == NULL) {
		util_err(errstr, errlen, "%s: %s", path, strerror(errno));
		goto fail;
	}
	if (strlen(real) >= sizeof(cfg->conf_dir)) {
		util_err(errstr, errlen, "%s: directory path too long", path);
		goto fail;
	}
	if (util_read_file(path, CONF_FILE_MAX, &text, &len, errstr, errlen) !=
	    0)
		goto fail;
	config_defaults(cfg, real);
	if (cfg_parse(cfg, path, text, len, errstr, errlen) != 0)
		goto fail;
	if (config_apply_env(cfg, envp, errstr, errlen) != 0)
		goto fail;
	if (config_validate(cfg, errstr, errlen) != 0)
		goto fail;
	rc = 0;
fail:
	free(text);
	free(real);
	return rc;
}

const char *
config_default_path(char *const *envp)
{
	size_t n = strlen(CONF_ENV_FILE);
	char *const *e;

	for (e = envp; e != NULL && *e != NULL; e++)
		if (strncmp(*e, CONF_ENV_FILE, n) == 0 && (*e)[n] == '=' &&
		    (*e)[n + 1] != '\0')
			return *e + n + 1;
	return CHARGE_DEFAULT_CONF;
}
