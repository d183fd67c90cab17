#include "server/elastic_pool.h"

#include <algorithm>
#include <chrono>
#include <system_error>

#include "core/log.h"

namespace tetra {

elastic_pool::elastic_pool(size_t min_threads, size_t max_threads, double idle_s)
    : min_(std::max<size_t>(1, min_threads)), max_(std::max(max_threads, std::max<size_t>(1, min_threads))),
      idle_s_(idle_s) {
    std::lock_guard<std::mutex> lk(mu_);
    for (size_t i = 0; i < min_; ++i) spawn(true);
}

elastic_pool::~elastic_pool() { shutdown(); }

void elastic_pool::spawn(bool core) {
    workers_.emplace_back();
    worker& w = workers_.back();  // std::list: stays where it is
    try {
        w.t = std::thread([this, &w, core] { run(w, core); });
        ++live_, ++starting_;
    } catch (const std::system_error& e) {  // out of threads: the task waits for a busy one
        workers_.pop_back();
        TETRA_LOG_WARN("server: cannot start another HTTP worker (%zu running): %s", live_, e.what());
    }
}

void elastic_pool::reap() {
    for (auto it = workers_.begin(); it != workers_.end();) {
        if (!it->done) {
            ++it;
            continue;
        }
        if (it->t.joinable()) it->t.join();  // it has returned from run() or is returning
        it = workers_.erase(it);
    }
}

void elastic_pool::enqueue(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> lk(mu_);
        jobs_.push_back(std::move(fn));
        reap();
        if (!stop_ && jobs_.size() > idle_ + starting_ && live_ < max_) spawn(false);
    }
    cv_.notify_one();
}

void elastic_pool::run(worker& self, bool core) {
    bool first = true;
    for (;;) {
        std::function<void()> fn;
        {
            std::unique_lock<std::mutex> lk(mu_);
            if (first) --starting_, first = false;
            auto ready = [&] { return stop_ || !jobs_.empty(); };
            ++idle_;
            bool woke = true;
            if (core) cv_.wait(lk, ready);
            else woke = cv_.wait_for(lk, std::chrono::duration<double>(idle_s_), ready);
            --idle_;
            if (jobs_.empty()) {
                if (stop_ || !woke) {  // shut down, or an extra thread idle for idle_s
                    --live_;
                    self.done = true;
                    return;
                }
                continue;
            }
            fn = std::move(jobs_.front());
            jobs_.pop_front();
        }
        fn();
    }
}

void elastic_pool::shutdown() {
    std::list<worker> all;
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (;;) {  // threads may still be started by tasks queued before the stop: join until none is left
        {
            std::lock_guard<std::mutex> lk(mu_);
            if (workers_.empty()) return;
            all.splice(all.end(), workers_);
        }
        for (worker& w : all)
            if (w.t.joinable()) w.t.join();
        all.clear();
    }
}

size_t elastic_pool::threads() const {
    std::lock_guard<std::mutex> lk(mu_);
    return live_;
}

}  // namespace tetra
