/*
 * curl_uv.h - libcurl's multi-socket interface on a libuv loop: one multi
 * handle, its sockets polled with uv_poll handles, its timeout on the loop
 * (a timeout of 0 runs in the same loop turn, from a uv_check handle, not
 * from a timer). libcurl is never called from inside one of its own
 * callbacks. A finished transfer is handed to the owner's callback, which
 * may remove it and add others.
 */
#ifndef CHARGE_CURL_UV_H
#define CHARGE_CURL_UV_H

#include <curl/curl.h>
#include <uv.h>

struct curl_uv;

/* A transfer finished with result (outside libcurl's callbacks). */
typedef void curl_uv_done_fn(CURL *easy, CURLcode result, void *arg);

/*
 * A multi handle driven by loop, keeping at most conns connections open;
 * done is called per finished transfer. NULL on ENOMEM.
 */
struct curl_uv *curl_uv_new(uv_loop_t *loop, long conns, curl_uv_done_fn *done,
    void *arg);

/*
 * Sets the options that tie an easy handle's sockets to cu (libcurl closes
 * a connection's socket through cu, which stops its poll first). Once per
 * easy handle, before its first transfer. 0 or -1.
 */
int curl_uv_easy_setup(struct curl_uv *cu, CURL *easy);

/* Starts a transfer (curl_multi_add_handle). 0 or -1. */
int curl_uv_add(struct curl_uv *cu, CURL *easy);

/* Takes a transfer out, finished or not (curl_multi_remove_handle). */
void curl_uv_remove(struct curl_uv *cu, CURL *easy);

/*
 * Closes the kept connections and the handles; cu is freed once libuv has
 * closed them. No transfer may be in it any more. NULL-safe.
 */
void curl_uv_free(struct curl_uv *cu);

#endif
