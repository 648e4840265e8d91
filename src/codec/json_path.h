/*
 * json_path.h - the path of a member in a JSON document, as problem
 * reports name it: "metadata.k", "line_items[3].description". Pure.
 */
#ifndef CHARGE_JSON_PATH_H
#define CHARGE_JSON_PATH_H

#include <stddef.h>

#define JSON_FIELD_SIZE 96 /* bytes with the NUL: "line_items[3].quantity" */

/*
 * dst = parent "." name (name alone when parent is ""), cut to size on a
 * UTF-8 boundary. A name that is not UTF-8 shows its bytes >= 0x80 as '?',
 * so a path is always UTF-8.
 */
void json_path_member(char *dst, size_t size, const char *parent,
    const char *name);

/* dst = parent "[" i "]", or parent alone when that does not fit in size. */
void json_path_index(char *dst, size_t size, const char *parent, size_t i);

#endif
