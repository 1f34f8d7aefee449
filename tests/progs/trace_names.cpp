// Target of the demangling tests: C++ names in a namespace, a
// constructor, a function template and an operator (and calls of
// operator new and delete). main() exits 0.
#include <cstdlib>

#define NI __attribute__((noinline))

namespace ns {
namespace ns1 {
struct foo {
    int x;
    NI explicit foo(int a) : x(a) {}
    NI int bar3() {
        void *p = malloc(4);
        free(p);
        int *q = new int(x);
        int v = *q;
        delete q;
        return v;
    }
    NI int bar() { return bar3() + 1; }
    NI int operator+(int y) const { return x + y; }
};
}  // namespace ns1
}  // namespace ns

template <typename T>
NI T twice(T a) {
    return a * 2;
}

int main() {
    ns::ns1::foo f(1);
    int r = f.bar() + twice<int>(3) + (f + 1);
    return r == 10 ? 0 : 1;
}
