/*
 * cgi.h - the CGI transport: one request from the environment and stdin,
 * its response to stdout, served on a loop of its own.
 */
#ifndef CHARGE_CGI_H
#define CHARGE_CGI_H

#include "auth.h"
#include "config.h"

/*
 * Reads the request from envp and stdin (blocking: this process serves
 * only it, within request_timeout_ms), runs the use case on a loop of its
 * own, writes the response to stdout. 0 once a response was written (or
 * the client went away), 1 when no loop could run.
 */
int cgi_serve(const struct config *cfg, const struct auth_table *auth,
    char **envp);

#endif
