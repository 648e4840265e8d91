/* fcgi_diff.c - placeholder; the differential test against libfcgi follows. */
int
main(void)
{
	return 0;
}
