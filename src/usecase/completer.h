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

#include "idem.h" /* enum idem_status: an enum has no forward declaration */

struct config;        /* config.h */
struct provider;      /* provider.h */
struct provider_call; /* provider.h */
struct redis_client;  /* redis.h */
struct completer;

/*
 * The settle step of an unknown record taken over (by the completer, or by
 * a retry with the same key: one rule for both, settle_step of settle.h).
 * Sets call->resume, call->created_ms and call->quiet_ms, and call->probe
 * once the record is older than provider_execute_window_s (rs->created_ms,
 * now_ms, Unix ms): then the provider is only read (the list of charges,
 * every page), never sent the charge again. Returns how many ms the caller
 * waits before the probe so that a "none" can prove absence (no earlier
 * delivery can still execute: provider_execute_max_ms, at least
 * provider_timeout_ms, after the later of the original attempt's
 * provider_deadline_ms and rs->quiet_ms); 0: now. The
 * probe's answer settles it: this request's charge completed, a proven
 * absence failed (502); anything else leaves it unknown. Pure.
 */
long long completer_settle_step(const struct config *cfg,
    const struct idem_resume *rs, long long now_ms, struct provider_call *call);

/*
 * The first moment a read of the list can prove that the record rs (just
 * asked about, still unknown) was never charged: its quiet point (the one
 * kept_quiet_ms a read-only probe kept; 0: the call may have sent, now)
 * plus settle_execute_ms, and never inside the execute window (Unix ms;
 * 0: the record's age is not known). The completer asks again then when
 * that comes before its next scheduled step.
 */
long long completer_proof_ms(const struct config *cfg,
    const struct idem_resume *rs, long long kept_quiet_ms);

/*
 * After the completer's record reply st: 1 when the index of unknown
 * outcomes forgets the record (ours written settled, or another attempt's
 * outcome found); 0 when a retry holds it now (FENCED) or another request
 * took the key (MISMATCH): their holder keeps the entry. Pure.
 */
int completer_index_forgets(enum idem_status st, int settled);

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
