/*
 * utf8.c - UTF-8 for the JSON reader: the length of a well-formed sequence,
 * whether bytes are UTF-8, a code point written as UTF-8.
 */
#include <stddef.h>

#include "utf8.h"

size_t
utf8_seq(const unsigned char *p, size_t n)
{
	unsigned char c = p[0], lo = 0x80, hi = 0xbf;
	size_t more;

	if (c >= 0xc2 && c <= 0xdf)
		more = 1;
	else if (c >= 0xe0 && c <= 0xef) {
		more = 2;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		more = 3;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* > U+10FFFF */
	} else
		return 0; /* continuation, overlong C0/C1, F5+ */
	if (n - 1 < more || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t k = 2; k <= more; k++)
		if ((p[k] & 0xc0) != 0x80)
			return 0;
	return more + 1;
}

int
utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;

	while (i < n) {
		if (p[i] < 0x80) {
			i++;
			continue;
		}
		if ((k = utf8_seq(p + i, n - i)) == 0)
			return 0;
		i += k;
	}
	return 1;
}

size_t
utf8_put(char *out, unsigned long cp)
{
	if (cp < 0x80) {
		out[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = (char)(0xc0 | (cp >> 6));
		out[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = (char)(0xe0 | (cp >> 12));
		out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		out[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | (cp >> 18));
	out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
	out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
	out[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}
