/*
 * clock.c - the clocks and a sleep that survives signals.
 */
#include <errno.h>
#include <time.h>

#include "clock.h"

long long
now_mono_us(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
		return 0;
	return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

long long
now_wall_ms(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
		return 0;
	return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

void
sleep_ms(long ms)
{
	struct timespec ts, rem;

	if (ms <= 0)
		return;
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000L;
	while (nanosleep(&ts, &rem) != 0 && errno == EINTR)
		ts = rem;
}
