// server/metrics: histogram semantics (cumulative, `le` inclusive as Prometheus defines it) and the
// exposition text written out by hand in prometheus_client's format (counters with _total on
// HELP/TYPE/sample, floats as 1.0), with vLLM's names under the tetra: prefix.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/llm_engine.h"
#include "engine/output_guard.h"
#include "server/metrics.h"

using namespace tetra;

TEST(metrics, histogram_le_is_inclusive_and_cumulative) {
    histogram h({0.1, 1.0});
    for (double v : {0.05, 0.1, 0.5, 1.0, 3.0}) h.observe(v);
    EXPECT_EQ(h.cumulative(), (std::vector<uint64_t>{2, 4}));
    EXPECT_EQ(h.count(), 5u);
    EXPECT_DOUBLE_EQ(h.sum(), 4.65);
}

TEST(metrics, histogram_text) {
    histogram h({0.5, 1.0});
    h.observe(0.25);
    h.observe(2.0);
    EXPECT_EQ(render_histogram("tetra:x_seconds", "Help text.", "model_name=\"m\"", h),
              "# HELP tetra:x_seconds Help text.\n"
              "# TYPE tetra:x_seconds histogram\n"
              "tetra:x_seconds_bucket{model_name=\"m\",le=\"0.5\"} 1.0\n"
              "tetra:x_seconds_bucket{model_name=\"m\",le=\"1.0\"} 1.0\n"
              "tetra:x_seconds_bucket{model_name=\"m\",le=\"+Inf\"} 2.0\n"
              "tetra:x_seconds_sum{model_name=\"m\"} 2.25\n"
              "tetra:x_seconds_count{model_name=\"m\"} 2.0\n");
}

TEST(metrics, numbers_and_labels) {
    EXPECT_EQ(prometheus_number(3), "3.0");
    EXPECT_EQ(prometheus_number(0.001), "0.001");
    EXPECT_EQ(prometheus_number(0.1 + 0.2), "0.30000000000000004");
    EXPECT_EQ(prometheus_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(metrics, render_has_vllm_names_and_engine_values) {
    server_metrics m;
    m.observe_request(0.01, 0.2, 1.5, 12, 30);
    m.observe_inter_token(0.03);
    engine_stats st;
    st.num_running = 3;
    st.num_waiting = 1;
    st.num_blocks_total = 100;
    st.num_blocks_free = 75;
    st.kv_usage = 0.25;
    st.prompt_tokens_total = 120;
    st.generation_tokens_total = 300;
    st.finished_abort = 2;
    std::string s = m.render(st, "smol");
    for (const char* line : {
             "# TYPE tetra:num_requests_running gauge\ntetra:num_requests_running{model_name=\"smol\"} 3.0\n",
             "tetra:num_requests_waiting{model_name=\"smol\"} 1.0\n",
             "tetra:kv_cache_usage_perc{model_name=\"smol\"} 0.25\n",
             "tetra:kv_cache_used_blocks{model_name=\"smol\"} 25.0\n",
             "# TYPE tetra:prompt_tokens_total counter\ntetra:prompt_tokens_total{model_name=\"smol\"} 120.0\n",
             "tetra:generation_tokens_total{model_name=\"smol\"} 300.0\n",
             "tetra:request_success_total{model_name=\"smol\",finished_reason=\"abort\"} 2.0\n",
             "tetra:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.25\"} 1.0\n",
             "tetra:time_to_first_token_seconds_bucket{model_name=\"smol\",le=\"0.1\"} 0.0\n",
             "tetra:inter_token_latency_seconds_count{model_name=\"smol\"} 1.0\n",
             "tetra:e2e_request_latency_seconds_sum{model_name=\"smol\"} 1.5\n",
             "tetra:request_prompt_tokens_bucket{model_name=\"smol\",le=\"20.0\"} 1.0\n",
             "tetra:request_generation_tokens_bucket{model_name=\"smol\",le=\"20.0\"} 0.0\n",
         }) {
        EXPECT_NE(s.find(line), std::string::npos) << "missing: " << line << "\nin:\n" << s;
    }
    EXPECT_EQ(s.back(), '\n');
}

// tetra:output_guard_trips_total{kind}: one sample per trip kind, read from the process-wide guard
// counters; a trip counted by the guard shows up at the next scrape.
TEST(metrics, output_guard_trips_by_kind) {
    server_metrics m;
    engine_stats st;
    auto sample = [&](const char* kind) {
        std::string s = m.render(st, "smol");
        std::string key = std::string("tetra:output_guard_trips_total{model_name=\"smol\",kind=\"") + kind + "\"} ";
        size_t at = s.find(key);
        EXPECT_NE(at, std::string::npos) << "missing: " << key << "\nin:\n" << s;
        return at == std::string::npos ? -1.0 : std::stod(s.substr(at + key.size()));
    };
    std::string s = m.render(st, "smol");
    EXPECT_NE(s.find("# TYPE tetra:output_guard_trips_total counter\n"), std::string::npos) << s;
    double nan0 = sample("non_finite"), row0 = sample("row_identical"), col0 = sample("collapsed"),
           zero0 = sample("zero_streak");
    output_guard::count_trip(guard_trip::NON_FINITE);
    output_guard::count_trip(guard_trip::NON_FINITE);
    output_guard::count_trip(guard_trip::ZERO_STREAK);
    EXPECT_EQ(sample("non_finite"), nan0 + 2);
    EXPECT_EQ(sample("row_identical"), row0);
    EXPECT_EQ(sample("collapsed"), col0);
    EXPECT_EQ(sample("zero_streak"), zero0 + 1);
    // A guard stopping a step counts the same way (what a request failed by the guard leaves behind).
    output_guard g;
    std::vector<float> logits(64, 0.5f);  // row-identical
    EXPECT_THROW(g.check_step(logits.data(), 64, 1, "decode step 3"), output_guard_error);
    EXPECT_EQ(sample("row_identical"), row0 + 1);
}
