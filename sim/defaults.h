/*
 * defaults.h - the simulator's limits and defaults, with their units.
 */
#ifndef SIM_DEFAULTS_H
#define SIM_DEFAULTS_H

#define SIM_DEFAULT_SECRET_KEY "sk_test_sim"
#define SIM_DEFAULT_RETENTION_S 172800 /* 48 h >= the responder's 24 h */
#define SIM_DEFAULT_LATE_MS 30000
#define SIM_DEFAULT_TRICKLE_MS 20
#define SIM_DEFAULT_SEED 1
#define SIM_DEFAULT_IDLE_TIMEOUT_S 300
#define SIM_DEFAULT_MAX_CONNECTIONS 4096
#define SIM_DEFAULT_MAX_KEYS 1000000 /* about 1 KiB each with its charge */
#define SIM_MAX_SECRET_KEYS 16

#define SIM_MAX_BODY_BYTES 65536   /* 64 KiB: a larger body is 413 */
#define SIM_MAX_URL_BYTES 8192     /* a longer request target is 414 */
#define SIM_MAX_HEADER_BYTES 16384 /* names + values of one request: 431 */
#define SIM_MAX_HEADER_VALUE 512   /* Authorization, Idempotency-Key kept */
#define SIM_MAX_IDEM_KEY 255       /* Stripe's limit on Idempotency-Key */
#define SIM_MAX_PAIRS 128          /* form pairs in one body */
#define SIM_MAX_STASH_BYTES 131072 /* pipelined bytes read ahead: 128 KiB */
#define SIM_READ_BUF_BYTES 65536   /* the loop's one read buffer */

#define SIM_MAX_AMOUNT 99999999
#define SIM_MAX_SOURCE 255
#define SIM_MAX_DESCRIPTION 1000
#define SIM_MAX_META_PAIRS 50
#define SIM_MAX_META_NAME 40
#define SIM_MAX_META_VALUE 500
#define SIM_LIST_DEFAULT_LIMIT 10 /* list and search pages, as Stripe's */
#define SIM_LIST_MAX_LIMIT 100

#define SIM_MAX_WEBHOOK_URLS 8    /* --webhook-url */
#define SIM_MAX_WEBHOOK_SECRETS 4 /* --webhook-secret: a v1 each */
#define SIM_DEFAULT_WEBHOOK_ATTEMPTS 8
#define SIM_DEFAULT_WEBHOOK_RETRY_MS 1000      /* then doubled */
#define SIM_DEFAULT_WEBHOOK_RETRY_MAX_MS 60000 /* the backoff's cap */
#define SIM_DEFAULT_WEBHOOK_TIMEOUT_MS 10000   /* Stripe waits about 10 s */
#define SIM_DEFAULT_WEBHOOK_SHUFFLE_MS 2000    /* a shuffled one waits <= */
#define SIM_DEFAULT_WEBHOOK_MAX_EVENTS 10000   /* kept for /_sim/events */
#define SIM_DEFAULT_WEBHOOK_CONCURRENCY 32     /* attempts in flight */

#define SIM_SWEEP_MS 1000          /* idle-connection sweep period */
#define SIM_PRUNE_MS 60000         /* expired keys pruned every minute */
#define SIM_MAX_LATENCY_MS 3600000 /* a drawn latency is capped at 1 h */
#define SIM_ID_HEX 24              /* ch_ and req_ suffixes */

#endif
