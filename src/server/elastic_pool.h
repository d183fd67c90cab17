// server/elastic_pool: the HTTP server's worker pool. cpp-httplib serves a connection on one task
// queue thread for its whole life, and a stream holds its thread until the stream ends, so a fixed
// pool made /health and /metrics wait for a free worker whenever more streams (or idle keep-alive
// connections) than workers were open (session 23's audit: /health answered after 4-11 s at 68
// streams on 64 workers). This pool keeps `min_threads` and starts another thread whenever a task
// would otherwise wait, up to `max_threads`; a thread above the minimum ends after `idle_s` idle.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <httplib.h>
#include <list>
#include <mutex>
#include <thread>

namespace tetra {

class elastic_pool final : public httplib::TaskQueue {
public:
    elastic_pool(size_t min_threads, size_t max_threads, double idle_s = 30.0);
    ~elastic_pool() override;
    elastic_pool(const elastic_pool&) = delete;
    elastic_pool& operator=(const elastic_pool&) = delete;

    void enqueue(std::function<void()> fn) override;
    // Runs the queued tasks, then joins every thread.
    void shutdown() override;
    // Threads alive now (for tests and logs).
    size_t threads() const;

private:
    struct worker {
        std::thread t;
        bool done = false;
    };
    void spawn(bool core);  // mu_ held
    void reap();            // mu_ held: joins the threads that ended
    void run(worker& self, bool core);

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> jobs_;
    std::list<worker> workers_;
    size_t min_, max_, idle_ = 0, live_ = 0, starting_ = 0;  // starting_: spawned, not yet waiting
    double idle_s_;
    bool stop_ = false;
};

}  // namespace tetra
