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

class pool {
  public:
    explicit pool(int n) : n_threads_(n < 1 ? 1 : n) {
        for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { work(i); });
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
        {
            std::lock_guard<std::mutex> lk(mu_);
            pending_ = n_threads_ - 1;
            ++generation_;
        }
        cv_.notify_all();
        chunk(0);
        std::unique_lock<std::mutex> lk(mu_);
        done_cv_.wait(lk, [this] { return pending_ == 0; });
    }

  private:
    void chunk(int i) {
        int64_t per = (n_ + n_threads_ - 1) / n_threads_;
        int64_t b = per * i, e = b + per < n_ ? b + per : n_;
        if (b < e) (*fn_)(b, e);
    }
    void work(int i) {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return generation_ != seen; });
                seen = generation_;
                if (stop_) return;
            }
            chunk(i);
            std::lock_guard<std::mutex> lk(mu_);
            if (--pending_ == 0) done_cv_.notify_one();
        }
    }

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mu_, run_mu_;
    std::condition_variable cv_, done_cv_;
    uint64_t generation_ = 0;
    int pending_ = 0;
    bool stop_ = false;
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
