/*
 * json_path.c - the paths that name a member in a problem report
 * ("line_items[3].quantity"), always UTF-8 and cut to the caller's buffer.
 */
#include <stdio.h>
#include <string.h>

#include "json_path.h"
#include "utf8.h"
#include "util.h"

static void
path_copy(char *dst, size_t size, const char *src)
{
	size_t n = util_utf8_prefix(src, size - 1);

	memcpy(dst, src, n);
	dst[n] = '\0';
}

void
json_path_member(char *dst, size_t size, const char *parent, const char *name)
{
	size_t n = 0, nlen = strlen(name);
	int ok = utf8_valid(name, nlen);

	if (*parent != '\0') {
		path_copy(dst, size, parent);
		n = strlen(dst);
		if (n + 1 < size)
			dst[n++] = '.';
	}
	for (size_t i = 0; i < nlen && n + 1 < size; i++) {
		unsigned char c = (unsigned char)name[i];

		if (ok && c >= 0xc0) {
			/* copy a whole sequence or stop */
			size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : 2;

			if (n + len >= size)
				break;
			memcpy(dst + n, name + i, len);
			n += len;
			i += len - 1;
		} else
			dst[n++] = (!ok && c >= 0x80) ? '?' : (char)c;
	}
	dst[n] = '\0';
}

void
json_path_index(char *dst, size_t size, const char *parent, size_t i)
{
	char idx[32];
	size_t n, k;

	path_copy(dst, size, parent);
	if (snprintf(idx, sizeof(idx), "[%zu]", i) < 0)
		return;
	n = strlen(dst);
	k = strlen(idx);
	if (n + k < size)
		memcpy(dst + n, idx, k + 1);
}
