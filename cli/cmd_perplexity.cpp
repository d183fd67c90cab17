// `tetra perplexity [MODEL] --file TEXT`: teacher-forced perplexity of a text file (tokenized with
// BOS as the tokenizer adds it, truncated to --max-model-len), and optionally a dump of all logits
// (NumPy .npy f32 [n_tokens, n_vocab] + ids JSON) for tools/compare_hf.py.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common.h"
#include "engine/generator.h"

namespace tetra {

namespace {

void write_npy(const std::string& path, const std::vector<float>& data, int64_t rows, int64_t cols) {
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "), }";
    size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::ofstream f(path, std::ios::binary);
    TETRA_CHECK(f.good(), "cannot write '%s'", path.c_str());
    f.write("\x93NUMPY\x01\x00", 8);
    uint16_t len = uint16_t(header.size());
    f.write(reinterpret_cast<const char*>(&len), 2);
    f.write(header.data(), std::streamsize(header.size()));
    f.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * sizeof(float)));
    TETRA_CHECK(f.good(), "short write to '%s'", path.c_str());
}

}  // namespace

void register_perplexity(CLI::App& app) {
    auto* cmd = app.add_subcommand("perplexity", "teacher-forced perplexity of a text file");
    auto mf = std::make_shared<model_flags>();
    auto file = std::make_shared<std::string>();
    auto dump = std::make_shared<std::string>();
    mf->add(cmd);
    cmd->add_option("-f,--file", *file, "UTF-8 text file")->required()->check(CLI::ExistingFile);
    cmd->add_option("--dump-logits", *dump, "write PREFIX.npy (logits) and PREFIX.json (token ids)");
    cmd->callback([=] {
        auto m = mf->load();
        std::ifstream f(*file, std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        std::vector<int32_t> ids = m->tok->encode(ss.str(), true);
        if (int64_t(ids.size()) > m->max_model_len) ids.resize(size_t(m->max_model_len));
        generator gen(*m->model, *m->be, *m->tok, m->max_model_len);
        std::vector<float> logits = gen.all_logits(ids);
        int64_t n_vocab = m->config.n_vocab;
        double nll = 0;
        for (size_t i = 0; i + 1 < ids.size(); ++i) {
            const float* row = logits.data() + i * size_t(n_vocab);
            double mx = row[0], z = 0;
            for (int64_t j = 1; j < n_vocab; ++j) mx = std::max(mx, double(row[j]));
            for (int64_t j = 0; j < n_vocab; ++j) z += std::exp(double(row[j]) - mx);
            nll += mx + std::log(z) - double(row[ids[i + 1]]);
        }
        nll /= double(ids.size() - 1);
        std::printf("tokens %zu  nll %.6f  perplexity %.4f\n", ids.size(), nll, std::exp(nll));
        if (!dump->empty()) {
            write_npy(*dump + ".npy", logits, int64_t(ids.size()), n_vocab);
            std::ofstream j(*dump + ".json");
            j << nlohmann::json{{"token_ids", ids}}.dump() << "\n";
            std::fprintf(stderr, "wrote %s.npy and %s.json\n", dump->c_str(), dump->c_str());
        }
    });
}

}  // namespace tetra
