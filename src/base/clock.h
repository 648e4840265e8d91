/*
 * clock.h - the clocks and a sleep that survives signals.
 */
#ifndef CHARGE_CLOCK_H
#define CHARGE_CLOCK_H

/* Monotonic clock in microseconds (0 if the clock fails). */
long long now_mono_us(void);

/* Wall clock in Unix milliseconds (0 if the clock fails). */
long long now_wall_ms(void);

/* Sleeps ms milliseconds, resuming after signals. */
void sleep_ms(long ms);

#endif
