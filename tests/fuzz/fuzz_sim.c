/*
 * fuzz_sim.c - libFuzzer harness for charge-provider-sim's parsers: the
 * form decoder (with sorting, percent- and JSON-encoding of what it
 * decoded), the path-segment decoder, token chains, the UTF-8 check, and
 * the store's replay of a data file holding the input (torn lines, bad
 * records). The target "sim" of fuzz.c; tests/fuzz/run.sh builds and
 * runs it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "form.h"
#include "fuzz.h"
#include "store.h"

#define FUZZ_RETENTION_S 1000000000
#define FUZZ_MAX_KEYS 1000

static void
fuzz_form(const char *s, size_t n)
{
	static struct sim_form f;
	struct sim_buf b = { 0 };
	char *dst = malloc(n + 1);
	size_t i;

	if (dst == NULL)
		return;
	if (sim_form_decode(s, n, dst, &f) == SIM_FORM_OK) {
		sim_form_sort(&f);
		for (i = 0; i < f.n; i++) {
			sim_pct_encode(&b, f.pairs[i].name,
			    f.pairs[i].name_len);
			sim_json_str(&b, f.pairs[i].value,
			    f.pairs[i].value_len);
			(void)sim_utf8_valid(f.pairs[i].value,
			    f.pairs[i].value_len);
		}
	}
	(void)sim_pct_decode(s, n, dst);
	(void)sim_token_pick(s, n, n % 7);
	free(dst);
	sim_buf_free(&b);
}

static void
fuzz_replay(const uint8_t *data, size_t n)
{
	char path[] = "/tmp/charge-fuzz-sim.XXXXXX", err[256];
	struct sim_store st;
	int fd = mkstemp(path);

	if (fd < 0)
		return;
	if (write(fd, data, n) == (ssize_t)n) {
		(void)sim_store_open(&st, path, SIM_FSYNC_NEVER,
		    FUZZ_RETENTION_S, FUZZ_MAX_KEYS, 0, err, sizeof(err));
		sim_store_close(&st);
	}
	close(fd);
	unlink(path);
}

void
fuzz_sim(const uint8_t *data, size_t n)
{
	fuzz_form((const char *)data, n);
	fuzz_replay(data, n);
}
