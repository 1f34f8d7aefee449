// Target of `wprobe trace -C`'s Rust test: a method and a function in a
// module, called from main (built with -C prefer-dynamic, so the executable
// holds only its own functions and std stays in its shared library).
//   trace_rust::shapes::total { Square::area = 4, Square::area = 9 } = 13
mod shapes {
    pub struct Square(pub u64);

    impl Square {
        #[inline(never)]
        pub fn area(&self) -> u64 {
            self.0 * self.0
        }
    }

    #[inline(never)]
    pub fn total(v: &[Square]) -> u64 {
        v.iter().map(Square::area).sum()
    }
}

fn main() {
    let v = [shapes::Square(2), shapes::Square(3)];
    println!("total {}", shapes::total(std::hint::black_box(&v)));
}
