// C++ variant of two_callers.c: the same 3:1 split, under mangled names, so the tests can
// check that frames come out demangled (xpu_test::Worker<3>::run(unsigned long), ...).
//
//   two_callers_cpp SECONDS
#include <cstdint>
#include <cstdlib>
#include <ctime>

namespace xpu_test {

volatile std::uint64_t sink;

// Not a leaf, so it keeps its frame pointer (see two_callers.c).
__attribute__((noinline)) std::uint64_t finish(std::uint64_t x) { return x ^ (x >> 31); }

__attribute__((noinline)) std::uint64_t spin(std::uint64_t units)
{
    std::uint64_t x = 0x9e3779b97f4a7c15ull;
    for (std::uint64_t i = 0; i < units * 200000; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return finish(x);
}

template <int Units>
struct Worker {
    __attribute__((noinline)) static void run(unsigned long rounds)
    {
        for (unsigned long r = 0; r < rounds; r++)
            sink += spin(Units);
    }
};

double cpu_seconds()
{
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

}  // namespace xpu_test

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? std::atof(argv[1]) : 1.0;
    while (xpu_test::cpu_seconds() < seconds) {
        xpu_test::Worker<3>::run(400);  // ~0.3 s, see two_callers.c
        xpu_test::Worker<1>::run(400);
    }
    return 0;
}
