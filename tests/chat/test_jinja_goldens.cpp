// Feature-level goldens: small templates rendered by Python jinja2 in transformers' environment
// (tools/gen_template_goldens.py -> tests/data/templates/goldens_features.json). Byte-exact output,
// or an error wherever jinja2 raised one.
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "chat/jinja.h"
#include "core/error.h"

namespace tetra {
namespace {

using ojson = nlohmann::ordered_json;

const ojson& features() {
    static const ojson j = [] {
        std::ifstream f(std::string(TETRA_SOURCE_DIR) + "/tests/data/templates/goldens_features.json");
        return f.good() ? ojson::parse(f) : ojson::object();
    }();
    return j;
}

std::vector<size_t> case_ids() {
    std::vector<size_t> ids;
    if (features().contains("cases"))
        for (size_t k = 0; k < features()["cases"].size(); ++k) ids.push_back(k);
    return ids;
}

class jinja_feature : public ::testing::TestWithParam<size_t> {};

TEST(jinja_feature_file, loaded) {
    ASSERT_TRUE(features().contains("cases")) << "missing tests/data/templates/goldens_features.json";
    EXPECT_GE(features()["cases"].size(), 100u);
}

TEST_P(jinja_feature, matches_jinja2) {
    const ojson& c = features()["cases"][GetParam()];
    std::string src = c["template"].get<std::string>();
    SCOPED_TRACE("case " + c["name"].get<std::string>() + ": " + src);
    jinja_render_options opts;
    std::tm tm{};
    tm.tm_year = 2024 - 1900; tm.tm_mon = 6; tm.tm_mday = 26;
    tm.tm_hour = 13; tm.tm_min = 45; tm.tm_sec = 7;
    std::time_t t = timegm(&tm);
    gmtime_r(&t, &tm);  // fills weekday and day of year
    opts.now = tm;
    if (c.contains("error")) {
        std::string err = c["error"].get<std::string>();
        EXPECT_THROW(jinja_template(src).render(features()["context"], opts), tetra::error) << "jinja2: " << err;
        if (err.rfind("TemplateError: ", 0) == 0) {  // raise_exception: the message must come through
            try {
                jinja_template(src).render(features()["context"], opts);
            } catch (const tetra::error& e) {
                EXPECT_NE(std::string(e.what()).find(err.substr(15)), std::string::npos) << e.what();
            }
        }
        return;
    }
    std::string got;
    try {
        got = jinja_template(src).render(features()["context"], opts);
    } catch (const tetra::error& e) {
        FAIL() << "unexpected error: " << e.what();
    }
    EXPECT_EQ(got, c["expected"].get<std::string>());
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
    return features()["cases"][info.param]["name"].get<std::string>();
}

INSTANTIATE_TEST_SUITE_P(goldens, jinja_feature, ::testing::ValuesIn(case_ids()), case_name);

}  // namespace
}  // namespace tetra
