// C++ under hugealloc: operator new/delete (sized and over-aligned, which libstdc++ sends to
// malloc and aligned_alloc), containers, exceptions (their objects come from malloc) and
// threads. Prints "cxx: ok".
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

struct alignas(256) Over {
    char bytes[1000];
};

int main() {
    std::vector<std::thread> threads;
    std::vector<size_t> results(4);
    for (int t = 0; t < 4; t++)
        threads.emplace_back([t, &results] {
            std::map<std::string, std::vector<int>> m;
            for (int i = 0; i < 100000; i++)
                m[std::to_string(i % 5000)].push_back(i);
            std::vector<std::unique_ptr<Over>> v;
            for (int i = 0; i < 1000; i++) {
                v.emplace_back(new Over);
                if (reinterpret_cast<std::uintptr_t>(v.back().get()) % alignof(Over) != 0)
                    std::abort();
            }
            size_t n = 0;
            for (int i = 0; i < 1000; i++) {
                try {
                    throw std::runtime_error(std::string(100 + i % 50, 'x'));
                } catch (const std::exception &e) {
                    n += std::string(e.what()).size();
                }
            }
            results[t] = m.size() + n;
        });
    for (auto &t : threads)
        t.join();
    size_t total = 0;
    for (size_t r : results)
        total += r;
    // 5000 keys and 1000 messages of 100..149 bytes (mean 124.5) per thread.
    if (total != 4 * (5000 + 124500)) {
        std::cout << "cxx: wrong total " << total << "\n";
        return 1;
    }
    std::cout << "cxx: ok\n";
    return 0;
}
