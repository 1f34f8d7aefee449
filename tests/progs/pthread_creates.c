// Creates and joins 3 threads running w(), one after the other.
#include <pthread.h>
#include <stdio.h>
static void *w(void *a) { return a; }
int main(void) { for (int i = 0; i < 3; i++) { pthread_t t; pthread_create(&t, 0, w, 0); pthread_join(t, 0); } return 0; }
