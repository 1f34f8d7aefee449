/* The library of syswide.c: lib_line() returns a line of text, as
 * readline() does for bashreadline.bt (a uretprobe reads it with
 * str(retval)). */
static const char *lines[] = { "echo zero", "echo one", "echo two", "echo three" };

__attribute__((noinline)) const char *lib_line(int i) {
    return lines[i & 3];
}
