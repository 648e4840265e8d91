/*
 * fuzz.c - one libFuzzer binary for every target of fuzz.h, so that the
 * suite builds once: FUZZ_TARGET names the target of a run (parsers, sim,
 * http1, wire, sig, rc). tests/fuzz/run.sh builds it (clang-14, ASan +
 * UBSan) and runs each target from its seeds.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz.h"

typedef void fuzz_fn(const uint8_t *data, size_t size);

static const struct {
	const char *name;
	fuzz_fn *fn;
} targets[] = {
	{ "parsers", fuzz_parsers },
	{ "sim", fuzz_sim },
	{ "http1", fuzz_http1 },
	{ "wire", fuzz_wire },
	{ "sig", fuzz_sig },
	{ "rc", fuzz_rc },
};

static fuzz_fn *target;

char *
fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (s == NULL)
		return NULL;
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *name = getenv("FUZZ_TARGET");
	size_t i;

	(void)argc;
	(void)argv;
	for (i = 0; name != NULL && i < sizeof(targets) / sizeof(targets[0]);
	     i++)
		if (strcmp(name, targets[i].name) == 0)
			target = targets[i].fn;
	if (target == NULL) {
		fprintf(stderr,
		    "fuzz: set FUZZ_TARGET to parsers, sim, http1, wire, sig or rc\n");
		exit(2);
	}
	return 0;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	target(data, size);
	return 0;
}
