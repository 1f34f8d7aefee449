/* libdispatch.c - a library function that leaves by a tail call through
 * a pointer (`jmp *%rax` at -O2), as OpenSSL's SSL_do_handshake does: its
 * own `ret` runs only for a negative argument. */
__attribute__((noinline)) int dispatch(int (*f)(int), int x)
{
    if (x < 0)
        return -1;
    return f(x + 1);
}
