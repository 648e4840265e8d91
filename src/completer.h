/*
 * completer.h - settles the outcomes nobody retries. In every process one
 * loop runs it: every COMPLETER_TICK_MS it takes the unknown records that
 * are due from the index (<prefix>unknown, scored by when to ask next),
 * takes each over as a retry would (resume.lua: a lease of lock_ttl_s),
 * asks the provider again with the same downstream key, and records what
 * it learns. The schedule is completer_schedule_s (ages of the record);
 * after its last step it asks whether the provider has a charge for the
 * key at all, and only a positive "none" settles it failed.
 */
#ifndef CHARGE_COMPLETER_H
#define CHARGE_COMPLETER_H

#include <uv.h>

#include "config.h"
#include "provider.h"
#include "redis.h"

struct completer;

/* Starts it on loop. NULL on ENOMEM. */
struct completer *completer_start(uv_loop_t *loop, const struct config *cfg,
    struct redis_client *redis, struct provider *provider);

/*
 * Stops it: no new step starts; a step in flight ends when its provider
 * call or Redis command does (free them next, then run the loop, which
 * frees the completer). NULL-safe.
 */
void completer_stop(struct completer *cp);

#endif
