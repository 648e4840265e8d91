/*
 * defaults.h - every default and limit of the responder, with its unit.
 * config.c takes its defaults from here; validation code takes its bounds.
 */
#ifndef CHARGE_DEFAULTS_H
#define CHARGE_DEFAULTS_H

/* Request limits (docs/API.md §4, §5). */
#define IDEM_KEY_MAX 255    /* bytes, visible ASCII */
#define AMOUNT_MIN 1        /* minor units */
#define AMOUNT_MAX 99999999 /* minor units */
#define SOURCE_TOKEN_MAX 64 /* chars after "tok_", per element of a chain */
#define SOURCE_MAX 255 /* bytes of a whole source (a chain "tok_a|tok_b|n1") */
#define CUSTOMER_MAX 255     /* bytes of UTF-8 */
#define DESCRIPTION_MAX 1000 /* bytes of UTF-8 */
#define METADATA_KEYS_MAX 50
#define METADATA_KEY_MAX 40    /* bytes */
#define METADATA_VALUE_MAX 500 /* bytes */
#define LINE_ITEMS_MAX 1000
#define LINE_ITEM_DESC_MAX 200 /* bytes */
#define LINE_ITEM_QTY_MIN 1
#define LINE_ITEM_QTY_MAX 10000
#define LINE_ITEM_UNIT_MIN 0        /* minor units */
#define LINE_ITEM_UNIT_MAX 99999999 /* minor units */
#define JSON_DEPTH_MAX 8            /* our schema needs 4 */
/*
 * JSON values (tree nodes) a body may hold: the largest valid body has
 * 4059 (1000 line items of 4, 50 metadata members, the rest); without a
 * bound a 1 MiB body of small array members built half a million nodes.
 */
#define JSON_VALUES_MAX 8192
#define VALIDATION_ERRORS_MAX 16 /* listed in a 400 */

/* Configuration defaults (docs/API.md §19). */
#define DEF_REDIS_URL "unix://../var/run/redis.sock"
#define DEF_REDIS_TIMEOUT_MS 1000
#define DEF_REDIS_MIN_REPLICAS 0         /* no WAIT after a record */
#define DEF_REDIS_REPLICA_TIMEOUT_MS 100 /* WAIT's timeout */
#define DEF_REDIS_TLS_CA_FILE ""         /* the system's trust store */
#define DEF_REDIS_TLS_CERT_FILE ""       /* no client certificate */
#define DEF_REDIS_TLS_KEY_FILE ""        /* the key is in the cert file */
#define DEF_REDIS_TLS_SERVER_NAME ""     /* each node's host */
#define DEF_REDIS_TLS_VERIFY 1
#define DEF_KEY_PREFIX "charge:"
#define DEF_LOCK_TTL_S 30
#define DEF_COMPLETED_TTL_S 86400     /* 24 h */
#define DEF_FAILED_TTL_S 300          /* 5 min */
#define DEF_MAX_REQUEST_BYTES 1048576 /* 1 MiB */
#define DEF_MAX_WAIT_S 10
#define DEF_SPILL_DIR "../var/spill"
#define DEF_SPILL_THRESHOLD_BYTES 16384 /* 16 KiB */
#define DEF_SPILL_GC_INTERVAL_S 3600    /* 1 h */
#define DEF_PROVIDER_LATENCY_MS 200
#define DEF_PROVIDER_TIMEOUT_MS 5000
#define DEF_API_KEYS_FILE "api-keys"
#define DEF_PROVIDER_LEDGER "../var/provider-ledger.log"
#define DEF_PROVIDER_SECRET "demo-provider-secret-change-me"
#define DEF_PROVIDER_URL "" /* the in-process simulation */
#define DEF_PROVIDER_API_KEY "sk_test_sim"
#define DEF_PROVIDER_CONNECT_TIMEOUT_MS 1000
#define DEF_PROVIDER_DEADLINE_MS 12000 /* all attempts of one request */
#define DEF_PROVIDER_CA_FILE ""        /* the system's trust store */
#define DEF_PROVIDER_TLS_VERIFY 1
#define DEF_PROVIDER_CLIENT "native" /* the HTTP provider's client */
#define DEF_COMPLETER_SCHEDULE_S "1,5,30,90,300,3600" /* ages, seconds */
/*
 * An unknown outcome is sent to the provider again (which executes it if
 * the first delivery never arrived) only this long after the request was
 * first claimed; after it the provider is only read (docs/API.md §17.3).
 */
#define DEF_PROVIDER_EXECUTE_WINDOW_S 60
#define EXECUTE_WINDOW_S_MAX 86400 /* 1 day */
/*
 * The longest a delivery may still execute (create its charge) after it
 * was sent: the provider documents no bound (a 409 proves one executing
 * now, nothing of when it ends), so this is an assumption, stated and
 * configured; no absence is concluded before the latest send plus this.
 */
#define DEF_PROVIDER_EXECUTE_MAX_MS 60000
/*
 * How far the provider's clock may be from ours (measured from every
 * answer's Date and every charge's created) for a list's "none" to prove
 * absence; beyond it, or while not measured, none is proven.
 */
#define DEF_PROVIDER_CLOCK_SKEW_MAX_S 60
#define CLOCK_SKEW_S_MAX 86400
/*
 * How long after a charge is created the provider's search may still not
 * show it (Stripe: "under 1 minute", longer during outages): the probe's
 * search covers what is older, its list what is younger. 0: no search.
 */
#define DEF_PROVIDER_SEARCH_LAG_S 300
#define SEARCH_LAG_S_MAX 86400
#define DEF_METRICS_FILE "../var/metrics.shm"
#define DEF_LOG_LEVEL "info"
#define DEF_LOG_FORMAT "text"      /* or "json": one object per line */
#define DEF_THREADS 0              /* event loops per process: one per core */
#define DEF_IO_THREADS 2           /* spill writes and reads off the loops */
#define DEF_MAX_INFLIGHT 16384     /* requests per process; about 12 KiB each */
#define DEF_DRAIN_TIMEOUT_MS 15000 /* SIGTERM: time to finish in flight */
#define DEF_REQUEST_TIMEOUT_MS 10000 /* reading params and body */
/* an idle kept connection; longer than nginx's upstream keepalive_timeout */
#define DEF_KEEPALIVE_IDLE_TIMEOUT_MS 75000
#define DEF_CONN_OUTPUT_MAX_BYTES 262144    /* 256 KiB unsent per connection */
#define DEF_BODY_MEMORY_MAX_BYTES 268435456 /* 256 MiB of bodies per process */

/* Hard bounds for configuration values. */
#define REDIS_TIMEOUT_MS_MAX 60000
#define REDIS_MIN_REPLICAS_MAX 16
#define REDIS_REPLICA_TIMEOUT_MS_MAX 60000
#define TTL_S_MAX 31536000             /* one year */
#define MAX_REQUEST_BYTES_MAX 67108864 /* 64 MiB */
#define MAX_WAIT_S_MAX 300
#define PROVIDER_MS_MAX 600000 /* 10 min */
#define THREADS_MAX 64
#define SPILL_GC_INTERVAL_S_MAX 86400 /* 24 h */
#define IO_THREADS_MAX 64
#define MAX_INFLIGHT_MAX 1048576
#define DRAIN_TIMEOUT_MS_MAX 600000           /* 10 min */
#define REQUEST_TIMEOUT_MS_MAX 600000         /* 10 min */
#define KEEPALIVE_IDLE_TIMEOUT_MS_MAX 3600000 /* 1 h */
#define CONN_OUTPUT_MIN_BYTES 4096
#define CONN_OUTPUT_MAX_BYTES_MAX 67108864    /* 64 MiB */
#define BODY_MEMORY_MAX_BYTES_MAX 68719476736 /* 64 GiB */
#define KEY_PREFIX_MAX 64                     /* bytes */
#define PATH_MAX_LEN 1024                     /* bytes, configured paths */
#define URL_MAX_LEN 1024

/* Identifiers. */
#define PRINCIPAL_MAX 64   /* [A-Za-z0-9_-] */
#define TOKEN_HEX_LEN 32   /* 128-bit random tokens, hex */
#define REQUEST_ID_MAX 64  /* bytes of an X-Request-Id the responder keeps */
#define TRACE_ID_HEX 32    /* a W3C trace-id: 16 bytes, lower-case hex */
#define SPAN_ID_HEX 16     /* a W3C parent-id (span): 8 bytes, hex */
#define TRACEPARENT_LEN 55 /* "00-" trace "-" span "-" flags */
#define SHA256_HEX_LEN 64
#define CHARGE_ID_HEX_LEN 24 /* "ch_" + 24 hex */

/* Waiting for an in-progress request (Prefer: wait=N). */
#define WAIT_POLL_FIRST_MS 20
#define WAIT_POLL_MAX_MS 250

/* /healthz: spill_dir needs room for this many spill thresholds, at least */
#define HEALTH_SPILL_ROOM 4
#define HEALTH_SPILL_ROOM_MIN_BYTES 65536

/*
 * The HTTP provider: a kept-alive connection idle this long is closed
 * rather than reused, below the simulator's idle timeout (300 s), so the
 * peer never closes one just as it is reused.
 */
#define PROVIDER_MAXAGE_CONN_S 60
/*
 * Kept-alive connections to the provider per loop, busy or idle. libcurl's
 * own default (4 per transfer in the multi handle at the moment one ends)
 * shrinks with the calls in flight, and closed a connection every few
 * charges at latency 0: about one call in eight paid a new connection.
 */
#define PROVIDER_CONNS_KEPT 1024
/* The completer: how often each process looks for due unknown records. */
#define COMPLETER_TICK_MS 1000
#define COMPLETER_BATCH 16 /* records taken per look */

/*
 * The provider's webhook route (docs/API.md §17.5): off until a secret is
 * configured. An event id is kept this long after it was decided, longer
 * than Stripe redelivers (3 days), so a redelivery changes nothing.
 */
#define DEF_PROVIDER_WEBHOOK_PATH "/webhooks/provider"
#define DEF_PROVIDER_WEBHOOK_SECRET ""       /* none: the route answers 404 */
#define DEF_PROVIDER_WEBHOOK_TOLERANCE_S 300 /* Stripe's libraries' */
#define WEBHOOK_TOLERANCE_S_MAX 86400        /* 1 day */
#define WEBHOOK_EVENT_ID_MAX 255             /* bytes of an event's id */
#define WEBHOOK_EVENT_TTL_S 345600           /* 4 days */

/* How long a 409 / 503 client should wait before retrying. */
#define RETRY_AFTER_IN_PROGRESS_S 1
#define RETRY_AFTER_UNAVAILABLE_S 1

#endif
