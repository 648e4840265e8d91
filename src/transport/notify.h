/*
 * notify.h - readiness and state for a service manager: the sd_notify(3)
 * datagram protocol on $NOTIFY_SOCKET (systemd Type=notify, or any
 * supervisor that binds such a socket). Without the variable, nothing.
 */
#ifndef CHARGE_NOTIFY_H
#define CHARGE_NOTIFY_H

/*
 * Sends state ("READY=1", "STOPPING=1", "RELOADING=1\nMONOTONIC_USEC=...",
 * newline-separated assignments) to $NOTIFY_SOCKET. 1 sent, 0 no socket
 * configured, -1 the send failed (errno).
 */
int notify_send(const char *state);

#endif
