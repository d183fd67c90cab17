#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"
#include "engine/llm_engine.h"
#include "engine/output_guard.h"

namespace tetra {

histogram::histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), buckets_(bounds_.size() + 1, 0) {
    TETRA_ASSERT(std::is_sorted(bounds_.begin(), bounds_.end()));
}

void histogram::observe(double v) {
    size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();  // first bound >= v
    ++buckets_[i];
    ++count_;
    sum_ += v;
}

std::vector<uint64_t> histogram::cumulative() const {
    std::vector<uint64_t> c(bounds_.size());
    uint64_t run = 0;
    for (size_t i = 0; i < bounds_.size(); ++i) c[i] = run += buckets_[i];
    return c;
}

std::string prometheus_label_value(const std::string& v) {
    std::string out;
    for (char c : v) {
        if (c == '\\') out += "\\\\";
        else if (c == '"') out += "\\\"";
        else if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

std::string prometheus_number(double v) {
    if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
    if (std::isnan(v)) return "NaN";
    char buf[64];
    if (v == std::floor(v) && std::fabs(v) < 1e15) {
        std::snprintf(buf, sizeof buf, "%.1f", v);  // prometheus_client writes floats: 3.0
    } else {
        std::snprintf(buf, sizeof buf, "%.17g", v);
        // shortest form that round-trips
        for (int prec = 1; prec <= 17; ++prec) {
            char b2[64];
            std::snprintf(b2, sizeof b2, "%.*g", prec, v);
            if (std::strtod(b2, nullptr) == v) {
                std::snprintf(buf, sizeof buf, "%s", b2);
                break;
            }
        }
    }
    return buf;
}

std::string render_histogram(const std::string& name, const std::string& help, const std::string& labels,
                             const histogram& h) {
    std::string s = "# HELP " + name + " " + help + "\n# TYPE " + name + " histogram\n";
    std::vector<uint64_t> c = h.cumulative();
    for (size_t i = 0; i < c.size(); ++i)
        s += name + "_bucket{" + labels + ",le=\"" + prometheus_number(h.bounds()[i]) + "\"} " +
             prometheus_number(double(c[i])) + "\n";
    s += name + "_bucket{" + labels + ",le=\"+Inf\"} " + prometheus_number(double(h.count())) + "\n";
    s += name + "_sum{" + labels + "} " + prometheus_number(h.sum()) + "\n";
    s += name + "_count{" + labels + "} " + prometheus_number(double(h.count())) + "\n";
    return s;
}

namespace {

// vLLM V1's buckets (vllm/v1/metrics/loggers.py).
std::vector<double> ttft_buckets() {
    return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
            2.5,   5.0,   7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
    return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
    return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}
std::vector<double> token_buckets() {  // 1, 2, 5 × powers of ten up to 100k (vLLM build_1_2_5_buckets)
    std::vector<double> b;
    for (double m = 1; m <= 100000; m *= 10)
        for (double f : {1.0, 2.0, 5.0})
            if (m * f <= 100000) b.push_back(m * f);
    return b;
}

void gauge(std::string& s, const std::string& name, const std::string& help, const std::string& labels, double v) {
    s += "# HELP " + name + " " + help + "\n# TYPE " + name + " gauge\n" + name + "{" + labels + "} " + prometheus_number(v) + "\n";
}

void counter(std::string& s, const std::string& name, const std::string& help, const std::string& labels, double v) {
    std::string n = name + "_total";
    s += "# HELP " + n + " " + help + "\n# TYPE " + n + " counter\n" + n + "{" + labels + "} " + prometheus_number(v) + "\n";
}

}  // namespace

server_metrics::server_metrics()
    : ttft_(ttft_buckets()), itl_(itl_buckets()), e2e_(e2e_buckets()), queue_(e2e_buckets()),
      prompt_tokens_(token_buckets()), generation_tokens_(token_buckets()) {}

void server_metrics::observe_request(double queue_s, double ttft_s, double e2e_s, int64_t n_prompt, int64_t n_output) {
    std::lock_guard<std::mutex> lk(mu_);
    if (queue_s >= 0) queue_.observe(queue_s);
    if (ttft_s >= 0) ttft_.observe(ttft_s);
    if (e2e_s >= 0) e2e_.observe(e2e_s);
    prompt_tokens_.observe(double(n_prompt));
    generation_tokens_.observe(double(n_output));
}

void server_metrics::observe_inter_token(double seconds) {
    std::lock_guard<std::mutex> lk(mu_);
    itl_.observe(seconds);
}

void server_metrics::count_http(int status) {
    std::lock_guard<std::mutex> lk(mu_);
    if (status >= 500) ++http_5xx_;
    else if (status >= 400) ++http_4xx_;
    else ++http_2xx_;
}

std::string server_metrics::render(const engine_stats& st, const std::string& model_name) const {
    std::string l = "model_name=\"" + prometheus_label_value(model_name) + "\"";
    std::string s;
    gauge(s, "tetra:num_requests_running", "Number of sequences in model execution batches.", l, double(st.num_running));
    gauge(s, "tetra:num_requests_waiting", "Number of sequences waiting to be processed.", l, double(st.num_waiting));
    gauge(s, "tetra:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", l, st.kv_usage);
    gauge(s, "tetra:kv_cache_used_blocks", "KV-cache blocks held by sequences (evictable prefix-cache blocks not counted).", l,
          double(st.num_blocks_total - st.num_blocks_free));
    gauge(s, "tetra:kv_cache_total_blocks", "KV-cache blocks in the pool.", l, double(st.num_blocks_total));
    counter(s, "tetra:prompt_tokens", "Number of prefill tokens processed.", l, double(st.prompt_tokens_total));
    counter(s, "tetra:generation_tokens", "Number of generation tokens processed.", l, double(st.generation_tokens_total));
    counter(s, "tetra:num_preemptions", "Cumulative number of preemptions from the engine.", l, double(st.num_preemptions));
    counter(s, "tetra:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", l,
            double(st.prefix_cache_queries));
    counter(s, "tetra:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", l,
            double(st.prefix_cache_hits));
    std::string n = "tetra:request_success_total";
    s += "# HELP " + n + " Count of successfully processed requests.\n# TYPE " + n + " counter\n";
    const std::pair<const char*, int64_t> reasons[] = {
        {"stop", st.finished_stop}, {"length", st.finished_length}, {"abort", st.finished_abort}, {"error", st.finished_error}};
    for (const auto& [r, v] : reasons) s += n + "{" + l + ",finished_reason=\"" + r + "\"} " + prometheus_number(double(v)) + "\n";
    // Process-wide counters of engine/output_guard (docs/no-silent-garbage.md §2), one sample per trip kind.
    n = "tetra:output_guard_trips_total";
    s += "# HELP " + n + " Requests failed by the output guard (NaN/Inf or degenerate logits, id-0 streaks).\n# TYPE " + n +
         " counter\n";
    for (guard_trip t : {guard_trip::NON_FINITE, guard_trip::ROW_IDENTICAL, guard_trip::COLLAPSED, guard_trip::ZERO_STREAK})
        s += n + "{" + l + ",kind=\"" + guard_trip_name(t) + "\"} " + prometheus_number(double(output_guard::trips(t))) + "\n";
    std::lock_guard<std::mutex> lk(mu_);
    s += render_histogram("tetra:time_to_first_token_seconds", "Histogram of time to first token in seconds.", l, ttft_);
    s += render_histogram("tetra:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", l, itl_);
    s += render_histogram("tetra:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", l, e2e_);
    s += render_histogram("tetra:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", l, queue_);
    s += render_histogram("tetra:request_prompt_tokens", "Number of prefill tokens processed.", l, prompt_tokens_);
    s += render_histogram("tetra:request_generation_tokens", "Number of generation tokens processed.", l, generation_tokens_);
    n = "tetra:http_requests_total";
    s += "# HELP " + n + " HTTP responses by status class.\n# TYPE " + n + " counter\n";
    s += n + "{status=\"2xx\"} " + prometheus_number(double(http_2xx_)) + "\n";
    s += n + "{status=\"4xx\"} " + prometheus_number(double(http_4xx_)) + "\n";
    s += n + "{status=\"5xx\"} " + prometheus_number(double(http_5xx_)) + "\n";
    return s;
}

}  // namespace tetra
