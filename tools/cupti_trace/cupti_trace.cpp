// A kernel timeline without Nsight Systems: a CUPTI injection library that records every kernel
// (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, which does not serialize kernels, so programmatic dependent
// launches still overlap) with its start/end timestamps, graph and node ids, grid and shared memory,
// and writes them as CSV at exit. Load it into any CUDA program, unchanged:
//
//   CUDA_INJECTION64_PATH=/path/libcupti_trace.so CUPTI_TRACE_OUT=trace.csv tetra bench ...
//
// Build: scripts/device-timeline.sh (g++ -shared, CUPTI from the CUDA toolkit). Analysis:
// tools/cupti_trace/timeline.py. Written for the device image, whose nsys could not import its own
// traces (docs/perf.md, sessions 10 and 18).
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t BUF_BYTES = size_t(8) << 20;
std::mutex g_mu;
std::vector<std::string> g_rows;

#define CUPTI_OK(call)                                                                             \
    do {                                                                                           \
        CUptiResult r_ = (call);                                                                   \
        if (r_ != CUPTI_SUCCESS) {                                                                 \
            const char* s_ = nullptr;                                                              \
            cuptiGetResultString(r_, &s_);                                                         \
            std::fprintf(stderr, "cupti_trace: %s failed: %s\n", #call, s_ ? s_ : "?");           \
        }                                                                                          \
    } while (0)

void CUPTIAPI buffer_requested(uint8_t** buf, size_t* size, size_t* max_records) {
    *buf = static_cast<uint8_t*>(std::aligned_alloc(8, BUF_BYTES));
    *size = BUF_BYTES;
    *max_records = 0;
}

std::string short_name(const char* mangled) {
    int st = 0;
    char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &st);
    std::string s = st == 0 && d ? d : mangled;
    std::free(d);
    // "void ns::(anonymous namespace)::kernel<a, b>(args)" -> "kernel<a; b>"
    const std::string anon = "(anonymous namespace)::";
    for (size_t p; (p = s.find(anon)) != std::string::npos;) s.erase(p, anon.size());
    if (s.compare(0, 5, "void ") == 0) s.erase(0, 5);
    int depth = 0;
    size_t cut = 0, end = s.size();
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '<') ++depth;
        else if (s[i] == '>') --depth;
        else if (depth == 0 && s[i] == '(') {
            end = i;
            break;
        } else if (depth == 0 && s[i] == ':' && i + 1 < s.size() && s[i + 1] == ':') cut = i + 2;
    }
    s = s.substr(cut, end - cut);
    for (char& c : s)
        if (c == ',') c = ';';
    return s;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buf, size_t, size_t valid) {
    CUpti_Activity* rec = nullptr;
    std::vector<std::string> rows;
    while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
        char line[512];
        std::snprintf(line, sizeof line, "%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%u,%s\n", (unsigned long long)k->start,
                      (unsigned long long)k->end, k->correlationId, k->graphId, (unsigned long long)k->graphNodeId,
                      k->gridX * k->gridY * k->gridZ, k->blockX * k->blockY * k->blockZ,
                      k->dynamicSharedMemory + k->staticSharedMemory, int(k->registersPerThread), k->streamId,
                      short_name(k->name).c_str());
        rows.emplace_back(line);
    }
    std::free(buf);
    std::lock_guard<std::mutex> lk(g_mu);
    g_rows.insert(g_rows.end(), rows.begin(), rows.end());
}

void write_out() {
    CUPTI_OK(cuptiActivityFlushAll(1));
    const char* path = std::getenv("CUPTI_TRACE_OUT");
    FILE* f = std::fopen(path && *path ? path : "cupti_trace.csv", "w");
    if (!f) {
        std::perror("cupti_trace: cannot write the trace");
        return;
    }
    std::fputs("start_ns,end_ns,correlation,graph,node,ctas,threads,smem,regs,stream,name\n", f);
    std::lock_guard<std::mutex> lk(g_mu);
    for (const std::string& r : g_rows) std::fputs(r.c_str(), f);
    std::fclose(f);
    std::fprintf(stderr, "cupti_trace: %zu kernels -> %s\n", g_rows.size(), path ? path : "cupti_trace.csv");
}

}  // namespace

extern "C" int InitializeInjection(void) {
    CUPTI_OK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    CUPTI_OK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    std::atexit(write_out);
    return 1;
}
