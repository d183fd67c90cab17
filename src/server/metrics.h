// server/metrics: Prometheus text exposition (format 0.0.4) of the engine's gauges and counters
// and the server's latency histograms, under vLLM's metric names with the `tetra:` prefix and a
// model_name label (serving.md §1.12). Counters are written as prometheus_client does: the
// `_total` suffix on HELP, TYPE and the sample. Thread-safe.
#pragma once
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace tetra {

struct engine_stats;

// Cumulative histogram with fixed upper bounds (le); +Inf is implicit.
class histogram {
public:
    explicit histogram(std::vector<double> bounds);
    void observe(double v);
    const std::vector<double>& bounds() const { return bounds_; }
    // counts()[i]: observations <= bounds()[i] (cumulative); count(): all of them.
    std::vector<uint64_t> cumulative() const;
    uint64_t count() const { return count_; }
    double sum() const { return sum_; }

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> buckets_;  // per bucket (not cumulative); last one is +Inf
    uint64_t count_ = 0;
    double sum_ = 0;
};

// The numbers /metrics shows that the server (not the engine) measures.
class server_metrics {
public:
    server_metrics();
    // One finished sequence: times in seconds (llm_engine::now() clock).
    void observe_request(double queue_s, double ttft_s, double e2e_s, int64_t n_prompt, int64_t n_output);
    void observe_inter_token(double seconds);
    void count_http(int status);

    // The whole exposition text: engine gauges/counters from `st` plus the histograms.
    std::string render(const engine_stats& st, const std::string& model_name) const;

private:
    mutable std::mutex mu_;
    histogram ttft_, itl_, e2e_, queue_, prompt_tokens_, generation_tokens_;
    uint64_t http_2xx_ = 0, http_4xx_ = 0, http_5xx_ = 0;
};

// Label value escaping (backslash, double quote, newline) as the exposition format requires.
std::string prometheus_label_value(const std::string& v);
// A sample value: integers without a fraction, others with enough digits to round-trip; +Inf.
std::string prometheus_number(double v);
// The lines of one histogram (HELP, TYPE, _bucket per bound and +Inf, _sum, _count).
std::string render_histogram(const std::string& name, const std::string& help, const std::string& labels,
                             const histogram& h);

}  // namespace tetra
