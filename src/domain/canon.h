/*
 * canon.h - the canonical form of a valid /charge body (docs/API.md §7.1):
 * the text the fingerprint is computed over and the charge object echoes.
 * Pure.
 */
#ifndef CHARGE_CANON_H
#define CHARGE_CANON_H

#include <stddef.h>

#include "schema.h"

/*
 * The canonical text of f, which schema_check() found valid: compact JSON of
 * amount, currency, source, customer and description (null when absent),
 * metadata (keys sorted bytewise; {} when absent) and line_items (each
 * {description, quantity, unit_amount}; [] when absent), strings escaped as
 * cJSON prints them. Equal parameters give equal text. Malloc'd,
 * NUL-terminated, length in *len; NULL on ENOMEM.
 */
char *canon_text(const struct charge_fields *f, size_t *len);

/*
 * The end of the JSON value at p in a canonical text (compact JSON): the
 * byte after it, where a ',', '}' or ']' (or the end) follows. A string
 * ends at its closing quote, an object or array at its closing bracket,
 * anything else at the next ',', '}' or ']'. NULL when the text ends
 * inside a string, object or array.
 */
const char *canon_value_end(const char *p, const char *end);

/*
 * The top-level member name of a canonical text (compact JSON, as
 * canon_text() writes it), read without parsing the rest: 1 and *s, *n the
 * bytes between the quotes of its string value, still escaped; 0 when it
 * is absent or null; -1 when text is not a compact JSON object or the
 * member is neither a string nor null.
 */
int canon_string_member(const char *text, size_t len, const char *name,
    const char **s, size_t *n);

/*
 * The next byte of an escaped string s[0..n) (canon_string_member()) at
 * *i, *i moved past it: the escapes put_string() writes (\" \\ \b \f \n
 * \r \t \u00xx) decoded. -1 at an escape it does not write.
 */
int canon_string_byte(const char *s, size_t n, size_t *i);

#endif
