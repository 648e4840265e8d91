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

struct config;        /* config.h */
struct idem_resume;   /* idem.h */
struct provider;      /* provider.h */
struct provider_call; /* provider.h */
struct redis_client;  /* redis.h */
struct completer;

/*
 * The settle step of an unknown record taken over (by the completer, or by
 * a retry with the same key: one rule for both). Sets call->resume, and
 * call->search when the provider is to be searched for a charge under the
 * key instead of asked again: the record's age (rs->created_ms, now_ms,
 * Unix ms) is past the last step of completer_schedule_s. The search must
 * not start while a delivery of an earlier attempt may still be in flight:
 * before provider_timeout_ms after the later of the original attempt's
 * provider_deadline_ms and rs->quiet_ms. Returns how many ms the caller
 * waits before starting the search (0: start now); a record too young to
 * wait for (more than provider_timeout_ms) is asked again instead. The
 * search's answer settles it: a charge with that charge, a positive "none"
 * failed (502); anything else leaves it unknown. A created_ms or quiet_ms
 * of 0 (not known) never searches. Pure.
 */
long long completer_settle_step(const struct config *cfg,
    const struct idem_resume *rs, long long now_ms, struct provider_call *call);

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
