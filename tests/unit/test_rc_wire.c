#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>
static void t1(void **s){(void)s;}
int main(void){const struct CMUnitTest t[]={cmocka_unit_test(t1)};return cmocka_run_group_tests(t,NULL,NULL);}
