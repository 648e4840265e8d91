/*
 * keyslot.c - prints the cluster slot of each line of stdin, as computed
 * by cluster.c, so that tests/ha/cluster.sh can compare it with a live
 * Redis's CLUSTER KEYSLOT. Lines are keys without their newline.
 */
#include <stdio.h>
#include <string.h>

#include "cluster.h"

int
main(void)
{
	char line[4096];
	size_t n;

	while (fgets(line, sizeof(line), stdin) != NULL) {
		n = strcspn(line, "\n");
		printf("%u\n", cluster_keyslot(line, n));
	}
	return ferror(stdin) ? 1 : 0;
}
