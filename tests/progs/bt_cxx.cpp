/* A C++ target of the one-liner tests: reference parameters (to an int,
 * a structure with a reference member, a class, an array) and a function
 * in a namespace, each called once with fixed values. */
struct Pair {
  int a, b;
  int &r;
};

class Box {
public:
  int w, h;
};

namespace geo {
__attribute__((noinline)) int area(int &n, Pair &p, Box &b) { return n + p.a + b.w; }
}

__attribute__((noinline)) int first(int (&v)[4]) { return v[0]; }

int main() {
  int n = 7;
  Pair p{1, 2, n};
  Box b{3, 4};
  int v[4] = {10, 20, 30, 40};
  return geo::area(n, p, b) + first(v) == 0;
}
