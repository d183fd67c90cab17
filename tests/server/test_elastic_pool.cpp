// server/elastic_pool: the HTTP worker pool grows while tasks would wait (a stream holds its worker
// for its whole life, so a fixed pool let /health wait behind streams), is bounded, shrinks back to
// its minimum when idle, and runs every task before shutdown returns.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "server/elastic_pool.h"

using namespace tetra;

namespace {

// A gate the tasks wait on until it opens.
struct gate {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
    void wait() {
        std::unique_lock<std::mutex> lk(mu);
        cv.wait(lk, [&] { return open; });
    }
    void release() {
        {
            std::lock_guard<std::mutex> lk(mu);
            open = true;
        }
        cv.notify_all();
    }
};

bool eventually(const std::function<bool()>& f, double seconds = 10) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
        if (f()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return f();
}

}  // namespace

TEST(elastic_pool, grows_while_tasks_wait_then_shrinks_to_its_minimum) {
    elastic_pool pool(2, 16, 0.2);
    EXPECT_EQ(pool.threads(), 2u);
    gate g;
    std::atomic<int> running{0}, finished{0};
    for (int i = 0; i < 10; ++i)  // 10 blocked tasks on a 2-thread minimum: all run at once
        pool.enqueue([&] {
            ++running;
            g.wait();
            ++finished;
        });
    EXPECT_TRUE(eventually([&] { return running == 10; })) << running << " of 10 tasks started";
    EXPECT_EQ(pool.threads(), 10u);
    std::atomic<bool> probe{false};  // a short task (a /health probe) is not stuck behind them
    pool.enqueue([&] { probe = true; });
    EXPECT_TRUE(eventually([&] { return probe.load(); }));
    g.release();
    EXPECT_TRUE(eventually([&] { return finished == 10; }));
    EXPECT_TRUE(eventually([&] { return pool.threads() == 2; })) << pool.threads() << " threads after idling";
    pool.enqueue([] {});  // reaps the ended threads
    pool.shutdown();
    EXPECT_EQ(pool.threads(), 0u);
}

TEST(elastic_pool, bounded_and_every_task_runs_before_shutdown_returns) {
    elastic_pool pool(1, 4, 30);
    gate g;
    std::atomic<int> running{0}, done{0};
    for (int i = 0; i < 12; ++i)
        pool.enqueue([&] {
            ++running;
            g.wait();
            ++done;
        });
    EXPECT_TRUE(eventually([&] { return running == 4; }));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(running, 4) << "more threads than max_threads";
    EXPECT_EQ(pool.threads(), 4u);
    g.release();
    pool.shutdown();
    EXPECT_EQ(done, 12);
}
