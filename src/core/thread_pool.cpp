#include "core/thread_pool.h"

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

#include "core/env.h"

namespace tetra {

namespace {

// Work sharing: a region is split into one fixed chunk per thread (so ranges, and any reduction
// inside a range, depend only on (n, threads)), but chunks are claimed from a shared counter, so
// whoever is running takes the next unstarted chunk. On an oversubscribed machine a descheduled
// worker then costs nothing: the caller does its chunk instead of waiting for it to wake.
// The counter holds (generation << 32 | chunk count << 16 | next chunk): a worker decides from that
// one word alone whether a chunk of *its* region is left, so it cannot claim against a later
// region's count (fn_/n_ are read only after a successful claim, while the region is still open).
class pool {
  public:
    explicit pool(int n) : n_threads_(n < 1 ? 1 : n > 4096 ? 4096 : n) {
        for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { work(); });
    }
    ~pool() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
            ++generation_;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }
    int size() const { return n_threads_; }

    void run(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
        std::unique_lock<std::mutex> run_lk(run_mu_);  // one parallel region at a time
        fn_ = &fn;
        n_ = n;
        const int chunks = int(n < n_threads_ ? n : n_threads_);
        done_.store(0, std::memory_order_relaxed);
        uint32_t gen;
        {
            std::lock_guard<std::mutex> lk(mu_);
            gen = uint32_t(++generation_);
            claim_.store(uint64_t(gen) << 32 | uint64_t(chunks) << 16, std::memory_order_release);
        }
        cv_.notify_all();
        while (help(gen)) {
        }
        // Every chunk is claimed; wait for those taken by workers.
        for (int spin = 0; spin < 64 && done_.load(std::memory_order_acquire) != chunks; ++spin)
            std::this_thread::yield();
        if (done_.load(std::memory_order_acquire) != chunks) {
            std::unique_lock<std::mutex> lk(mu_);
            done_cv_.wait(lk, [&] { return done_.load(std::memory_order_acquire) == chunks; });
        }
    }

  private:
    // Claims and runs one chunk of region `gen`; false when none is left (or the region is over).
    bool help(uint32_t gen) {
        uint64_t cur = claim_.load(std::memory_order_acquire);
        for (;;) {
            if (uint32_t(cur >> 32) != gen) return false;
            const int idx = int(cur & 0xFFFF), chunks = int((cur >> 16) & 0xFFFF);
            if (idx >= chunks) return false;
            if (claim_.compare_exchange_weak(cur, cur + 1, std::memory_order_acq_rel)) {
                int64_t per = (n_ + chunks - 1) / chunks;
                int64_t b = per * idx, e = b + per < n_ ? b + per : n_;
                if (b < e) (*fn_)(b, e);
                if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
                    std::lock_guard<std::mutex> lk(mu_);
                    done_cv_.notify_one();
                }
                return true;
            }
        }
    }
    void work() {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return generation_ != seen; });
                seen = generation_;
                if (stop_) return;
            }
            while (help(uint32_t(seen))) {
            }
        }
    }

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_, run_mu_;
    std::condition_variable cv_, done_cv_;
    uint64_t generation_ = 0;
    bool stop_ = false;
    std::atomic<uint64_t> claim_{0};
    std::atomic<int> done_{0};
    const std::function<void(int64_t, int64_t)>* fn_ = nullptr;
    int64_t n_ = 0;
};

int g_requested = 0;
std::unique_ptr<pool> g_pool;
std::mutex g_pool_mu;
thread_local bool t_inside = false;

pool& get_pool() {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    if (!g_pool) {
        int n = g_requested;
        if (n <= 0) n = int(env_int("TETRA_NUM_THREADS", 0));
        if (n <= 0) n = int(std::thread::hardware_concurrency());
        g_pool = std::make_unique<pool>(n);
    }
    return *g_pool;
}

}  // namespace

int num_threads() { return get_pool().size(); }

void set_num_threads(int n) {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    g_requested = n;
    g_pool.reset();
}

void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    pool& p = get_pool();
    if (t_inside || p.size() == 1 || n == 1) {
        fn(0, n);
        return;
    }
    t_inside = true;
    struct reset { ~reset() { t_inside = false; } } r;
    p.run(n, [&](int64_t b, int64_t e) {
        bool was = t_inside;
        t_inside = true;
        fn(b, e);
        t_inside = was;
    });
}

}  // namespace tetra
