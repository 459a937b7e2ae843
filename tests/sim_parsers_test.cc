// Input parsers: .npy logits, token metadata CSV, request traces and TOML scenarios; replay's error paths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "sim/errors.h"
#include "sim/meta_csv.h"
#include "sim/npy.h"
#include "sim/replay.h"
#include "sim/scenario.h"
#include "sim/sim_config.h"
#include "sim/trace_reader.h"
#include "tests/sim_test_util.h"

namespace moe::sim {
namespace {

using testing::expect_throw_with;
using testing::ScratchDir;

// A .npy image with the given header dict and `data_bytes` bytes of payload.
std::string npy_image(const std::string& dict, size_t data_bytes, int major = 1) {
  std::string header = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(major);
  out += '\0';
  const size_t n = header.size();
  out += static_cast<char>(n & 0xff);
  out += static_cast<char>((n >> 8) & 0xff);
  if (major != 1) out += std::string(2, '\0');
  out += header;
  out += std::string(data_bytes, '\0');
  return out;
}

TEST(SimNpy, RoundTripsAndReadsVersion2) {
  ScratchDir dir;
  LogitsMatrix m;
  m.rows = 3;
  m.cols = 4;
  for (int i = 0; i < 12; ++i) m.values.push_back(0.5f * static_cast<float>(i) - 1.0f);
  write_npy_f32(dir.file("a.npy"), m);
  const LogitsMatrix r = read_npy_f32(dir.file("a.npy"));
  EXPECT_EQ(r.rows, 3);
  EXPECT_EQ(r.cols, 4);
  EXPECT_EQ(std::memcmp(r.values.data(), m.values.data(), 48), 0);
  const auto v2 =
      parse_npy_f32(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5), }", 40, 2), "v2");
  EXPECT_EQ(v2.rows, 2);
  EXPECT_EQ(v2.cols, 5);
}

TEST(SimNpy, RejectsMalformedFilesNamingTheProblem) {
  const std::string ok = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  expect_throw_with<DataError>([] { parse_npy_f32("PK\x03\x04 not numpy", "x"); }, "bad magic");
  expect_throw_with<DataError>([&] { parse_npy_f32(npy_image(ok, 24, 4), "x"); },
                               "unsupported format version 4");
  expect_throw_with<DataError>(
      [] {
        parse_npy_f32(npy_image("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24), "x");
      },
      "dtype '>f4' is not supported");
  expect_throw_with<DataError>(
      [] {
        parse_npy_f32(npy_image("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", 48), "x.npy");
      },
      "numpy.save('x.npy', a.astype('<f4'))");
  expect_throw_with<DataError>(
      [] { parse_npy_f32(npy_image("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24), "x"); },
      "fortran_order");
  expect_throw_with<DataError>(
      [] {
        parse_npy_f32(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 4), }", 96), "x");
      },
      "2-D");
  expect_throw_with<DataError>(
      [] { parse_npy_f32(npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", 24), "x"); },
      "1-D");
  expect_throw_with<DataError>([&] { parse_npy_f32(npy_image(ok, 20), "x"); }, "truncated");
  expect_throw_with<DataError>([&] { parse_npy_f32(npy_image(ok, 28), "x"); }, "longer");
  expect_throw_with<DataError>([&] { parse_npy_f32(npy_image(ok, 24).substr(0, 30), "x"); },
                               "truncated header");
  expect_throw_with<DataError>([] { parse_npy_f32(npy_image("{'descr': '<f4', 'shape': (2, 3)}", 24), "x"); },
                               "no 'fortran_order'");
  expect_throw_with<DataError>([] { parse_npy_f32(npy_image("{'descr': '<f4' 'shape'", 24), "x"); },
                               "malformed");
  expect_throw_with<DataError>([] { read_npy_f32("/nonexistent/file.npy"); }, "cannot open");
}

// A .npy image holding `values` as raw bytes of the dtype `descr` (shape rows x cols).
template <class T>
std::string npy_of(const std::string& descr, int rows, int cols, const std::vector<T>& values) {
  std::string img = npy_image("{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" +
                                  std::to_string(rows) + ", " + std::to_string(cols) + "), }",
                              0);
  img.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  return img;
}

TEST(SimNpy, ConvertsFloat64AndFloat16SayingSo) {
  const std::vector<double> f8 = {0.1,
                                  -2.5,
                                  1e-50,
                                  3.0e38,
                                  -std::numeric_limits<double>::infinity(),
                                  std::numeric_limits<double>::quiet_NaN()};
  const LogitsMatrix a = parse_npy_f32(npy_of("<f8", 2, 3, f8), "x");
  EXPECT_EQ(a.converted_from, "float64");
  ASSERT_EQ(a.values.size(), 6u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.values[i], static_cast<float>(f8[i])) << i;  // round to nearest
  EXPECT_TRUE(std::isnan(a.values[5]));
  // A finite float64 beyond float32's range is not silently made infinite.
  expect_throw_with<DataError>(
      [] {
        parse_npy_f32(npy_of<double>("<f8", 1, 2, {1.0, -1e39}), "x");
      },
      "-1e+39 at row 0, column 1 does not fit float32");
  // float16: 1, -2, 65504 (largest), 2^-24 (smallest subnormal), +inf: exact.
  const LogitsMatrix h =
      parse_npy_f32(npy_of<uint16_t>("<f2", 1, 5, {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00}), "x");
  EXPECT_EQ(h.converted_from, "float16");
  EXPECT_EQ(h.values,
            (std::vector<float>{1.0f, -2.0f, 65504.0f, 0x1p-24f, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(parse_npy_f32(npy_of<float>("<f4", 1, 1, {1.5f}), "x").converted_from, "");
  // The float64 payload is checked against the shape at 8 bytes a value.
  expect_throw_with<DataError>(
      [] {
        parse_npy_f32(npy_of<double>("<f8", 2, 2, {1, 2, 3}), "x");
      },
      "truncated");
}

TEST(SimInputFiles, NameADirectoryOrAMissingPath) {
  ScratchDir dir;
  const std::string d = dir.file("");
  std::filesystem::create_directories(dir.file("sub"));
  const std::string sub = dir.file("sub");
  expect_throw_with<DataError>([&] { read_npy_f32(sub); },
                               "logits file '" + sub + "' is a directory, not a file");
  expect_throw_with<DataError>([&] { read_meta_csv(sub); },
                               "meta file '" + sub + "' is a directory, not a file");
  expect_throw_with<DataError>([&] { read_trace(sub); },
                               "trace file '" + sub + "' is a directory, not a file");
  expect_throw_with<DataError>([&] { read_scenario(sub); },
                               "scenario file '" + sub + "' is a directory, not a file");
  expect_throw_with<DataError>([&] { read_trace(sub + "/none.csv"); },
                               "cannot open trace file '" + sub + "/none.csv': no such file or directory");
  expect_throw_with<DataError>([&] { read_meta_csv(dir.write("f", "x") + "/below"); },
                               "cannot open meta file");
}

TEST(SimNpy, CorruptFilesNeverCrash) {
  // Every truncation and many random byte flips of a valid file: either a clean parse or a DataError.
  const std::string good = npy_image("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }", 48);
  auto parse = [](const std::string& bytes) {
    try {
      const LogitsMatrix m = parse_npy_f32(bytes, "fuzz");
      EXPECT_EQ(static_cast<int64_t>(m.values.size()), m.rows * m.cols);
    } catch (const DataError&) {
    }
  };
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(parse_npy_f32(good.substr(0, n), "fuzz"), DataError) << "truncated to " << n;
  }
  uint64_t x = 12345;
  for (int i = 0; i < 20000; ++i) {
    std::string bytes = good;
    for (int flips = 0; flips < 3; ++flips) {
      x = x * 6364136223846793005ull + 1442695040888963407ull;
      const size_t at = (x >> 33) % 80;  // the magic, version, length and header dict
      bytes[at] = static_cast<char>(x >> 17);
    }
    parse(bytes);
  }
}

TEST(SimMetaCsv, ReadsAndChecksRows) {
  ScratchDir dir;
  const auto ok = read_meta_csv(dir.write("m.csv", "request_id,position\n5,0\n5,1\n9,0\n"), 3);
  ASSERT_EQ(ok.size(), 3u);
  EXPECT_EQ(ok[2].request_id, 9u);
  EXPECT_EQ(ok[1].position, 1u);
  expect_throw_with<DataError>([&] { read_meta_csv(dir.write("a.csv", "request_id,position\n5,0\n"), 2); },
                               "has 1 rows but the logits have 2");
  expect_throw_with<DataError>([&] { read_meta_csv(dir.write("b.csv", "id,pos\n5,0\n")); },
                               "expected the header");
  expect_throw_with<DataError>([&] { read_meta_csv(dir.write("c.csv", "request_id,position\n5,x\n")); },
                               "line 2");
  expect_throw_with<DataError>([&] { read_meta_csv(dir.write("d.csv", "request_id,position\n5,1,2\n")); },
                               "expected 2 fields");
  expect_throw_with<DataError>([&] { read_meta_csv(dir.write("e.csv", "")); }, "empty");
}

TEST(SimTrace, ReadsCsvAndJsonl) {
  ScratchDir dir;
  const auto csv =
      read_trace(dir.write("t.csv", "prompt_len,arrival_step,decode_len\n10,0,5\n# comment\n3,2,0\n"));
  ASSERT_EQ(csv.size(), 2u);
  EXPECT_EQ(csv[1].id, 1u);
  EXPECT_EQ(csv[1].arrival_step, 2);
  EXPECT_EQ(csv[0].prompt_len, 10u);
  EXPECT_EQ(csv[0].decode_len, 5u);
  const auto jsonl = read_trace(
      dir.write("t.jsonl",
                "{\"arrival_time\": 1.7, \"prompt_len\": 4, \"decode_len\": 2, \"request_id\": 77}\n\n"
                "{\"arrival_time\": 0, \"prompt_len\": 1, \"decode_len\": 0}\n"));
  ASSERT_EQ(jsonl.size(), 2u);
  EXPECT_EQ(jsonl[0].id, 77u);
  EXPECT_EQ(jsonl[0].arrival_step, 1);
  EXPECT_EQ(jsonl[1].id, 1u);
}

TEST(SimTrace, RejectsBadRowsWithTheLine) {
  ScratchDir dir;
  expect_throw_with<DataError>([&] { read_trace(dir.write("a.csv", "arrival_step,prompt_len\n0,5\n")); },
                               "line 2: missing decode_len");
  expect_throw_with<DataError>(
      [&] { read_trace(dir.write("b.csv", "arrival_step,prompt_len,decode_len\n0,5,1\n0,0,1\n")); },
      "line 3: prompt_len must be an integer >= 1");
  expect_throw_with<DataError>(
      [&] { read_trace(dir.write("c.csv", "arrival_step,prompt_len,decode_len\n0,x,1\n")); }, "line 2");
  expect_throw_with<DataError>([&] { read_trace(dir.write("d.jsonl", "{\"prompt_len\": 3,\n")); },
                               "not valid JSON");
  expect_throw_with<DataError>(
      [&] { read_trace(dir.write("e.csv", "arrival_step,prompt_len,decode_len\n")); }, "no requests");
  expect_throw_with<DataError>(
      [&] {
        read_trace(dir.write("f.csv", "request_id,arrival_step,prompt_len,decode_len\n4,0,1,1\n4,0,1,1\n"));
      },
      "duplicate request_id 4");
  expect_throw_with<DataError>([] { read_trace("/nonexistent.csv"); }, "cannot open");
  // Arrival times beyond the stated bound (2^30 + 1) are refused before they are converted to a step.
  expect_throw_with<DataError>(
      [] { parse_trace("arrival_time,prompt_len,decode_len\n1e300,1,1\n", "g.csv", false); },
      "line 2: arrival_time must be a number in [0, 2^30 + 1) (got 1e+300)");
  expect_throw_with<DataError>(
      [] { parse_trace("{\"arrival_time\": 2e9, \"prompt_len\": 1, \"decode_len\": 0}", "g.jsonl", true); },
      "arrival_time must be a number in [0, 2^30 + 1)");
}

TEST(SimScenario, EveryFlagHasAKeyAndFlagsOverride) {
  const Overrides o = parse_scenario(
      "mode = \"stable\"\nseed = 3\n[router]\nexperts = 16\ntop-k = 4\n[workload]\n"
      "prompt-len = \"lognormal:mean=512,sigma=0.8\"\n[sweep]\ncapacity-factors = [0.5, 1.0, 2]\n"
      "axis = [\"top-k=1,2\", \"scope=batch,request\"]\njson = true\n",
      "s.toml");
  EXPECT_EQ(o.at("experts"), "16");
  EXPECT_EQ(o.at("capacity-factors"), "0.5,1,2");
  EXPECT_EQ(o.at("axis"), "top-k=1,2;scope=batch,request");
  Overrides with_flag = o;
  with_flag["top-k"] = "2";  // a flag overrides the file
  const SimConfig c = build_config(with_flag);
  EXPECT_EQ(c.router.num_experts, 16);
  EXPECT_EQ(c.router.top_k, 2);
  EXPECT_EQ(c.policy.scope, CapacityScope::kPrefix);  // the stable mode
  EXPECT_EQ(c.sweep.axes.size(), 2u);
  EXPECT_TRUE(c.json);
  EXPECT_EQ(c.workload.prompt_len.to_string(), "lognormal:mean=512,sigma=0.8");
}

TEST(SimScenario, RejectsUnknownKeysAndMalformedFiles) {
  expect_throw_with<UsageError>([] { parse_scenario("topk = 2\n", "s.toml"); },
                                "key 'topk': unknown setting");
  expect_throw_with<UsageError>([] { parse_scenario("top-k = 2\n[x]\ntop-k = 3\n", "s.toml"); },
                                "given twice");
  expect_throw_with<DataError>([] { parse_scenario("top-k = = 2\n", "s.toml"); },
                               "malformed scenario 's.toml'");
  expect_throw_with<DataError>([] { read_scenario("/nonexistent.toml"); }, "cannot open");
  // Not UTF-8 (the scenario fuzzer's input: toml11 read out of bounds reporting it), named by byte and line.
  expect_throw_with<DataError>([] { parse_scenario("'\xec\xec\xec''=", "s.toml"); },
                               "malformed scenario 's.toml': not UTF-8 (byte 0xec at line 1, column 2)");
  expect_throw_with<DataError>(
      [] {
        parse_scenario(
            "seed = 1\nmode = \"st\xc0\xaf"
            "able\"\n",
            "s.toml");
      },
      "(byte 0xc0 at line 2, column 11)");
  EXPECT_EQ(
      parse_scenario("mode = \"stable\" # caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\n", "s.toml").at("mode"),
      "stable");
  expect_throw_with<UsageError>([] { build_config(parse_scenario("top-k = \"two\"\n", "s.toml")); },
                                "--top-k: expected an integer");
}

TEST(SimConfigTest, PresetAndModeComeFirstThenExplicitSettings) {
  const SimConfig c =
      build_config({{"preset", "qwen2-moe"}, {"mode", "stable"}, {"priority", "score"}, {"top-k", "2"}});
  EXPECT_EQ(c.router.num_experts, 60);  // from the preset
  EXPECT_EQ(c.router.top_k, 2);         // explicit beats preset
  EXPECT_FALSE(c.router.renormalize);
  EXPECT_EQ(c.policy.scope, CapacityScope::kPrefix);  // from the mode
  EXPECT_EQ(c.policy.priority, Priority::kScore);     // explicit beats mode
  expect_throw_with<UsageError>([] { build_config({{"top-k", "9"}}); }, "top_k (9) exceeds num_experts (8)");
  expect_throw_with<UsageError>([] { build_config({{"capacity-factor", "-1"}}); }, "capacity_factor must be");
  expect_throw_with<UsageError>([] { build_config({{"mode", "fast"}}); }, "unknown dispatch mode 'fast'");
  expect_throw_with<UsageError>(
      [] {
        build_config({{"scope", "global"}});
      },
      "unknown capacity scope 'global'");
  expect_throw_with<UsageError>([] { build_config({{"preset", "gpt"}}); }, "unknown router preset 'gpt'");
}

TEST(SimReplay, WritesThePlanAndSurfacesRouterErrorsWithTheRow) {
  ScratchDir dir;
  LogitsMatrix m;
  m.rows = 4;
  m.cols = 4;
  m.values = {1, 0, 0, 0, 0, 2, 0, 0, 3, 0, 0, 0, 0, 0, 0, 4};
  write_npy_f32(dir.file("l.npy"), m);
  Overrides o = {{"logits", dir.file("l.npy")}, {"out", dir.file("plan.csv")}, {"top-k", "1"}};
  const ReplayResult r = run_replay(build_config(o));
  EXPECT_EQ(r.config.router.num_experts, 4);  // from the file
  EXPECT_EQ(r.stats.tokens, 4);
  const std::string csv = testing::read_file(dir.file("plan.csv"));
  EXPECT_EQ(csv.rfind("# moe-sim ", 0), 0u);
  EXPECT_NE(csv.find("\ntoken,j,expert,slot,weight,status\n0,0,0,0,1,kept\n"), std::string::npos) << csv;
  // Two tokens want expert 0 with capacity ceil(1.25 * 4 / 4) = 2: both kept; cf 0.5 keeps one.
  o["capacity-factor"] = "0.5";
  run_replay(build_config(o));
  EXPECT_NE(testing::read_file(dir.file("plan.csv")).find("2,0,-1,-1,0,dropped"), std::string::npos);

  // --experts must match the file.
  o["experts"] = "8";
  expect_throw_with<UsageError>([&] { run_replay(build_config(o)); },
                                "--experts 8 does not match the 4 experts");
  o.erase("experts");
  // A row of NaNs: the router's error, naming the row.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  m.values[4] = m.values[5] = m.values[6] = m.values[7] = nan;
  write_npy_f32(dir.file("nan.npy"), m);
  o["logits"] = dir.file("nan.npy");
  expect_throw_with<DataError>([&] { run_replay(build_config(o)); }, "token row 1 has no finite logit");
  // Meta with the wrong length.
  o["logits"] = dir.file("l.npy");
  o["meta"] = dir.write("m.csv", "request_id,position\n1,0\n1,1\n");
  expect_throw_with<DataError>([&] { run_replay(build_config(o)); }, "has 2 rows but the logits have 4");
  // Duplicate positions where the policy needs them distinct: the planner's error.
  o["meta"] = dir.write("d.csv", "request_id,position\n1,0\n1,0\n2,0\n2,1\n");
  o["mode"] = "stable";
  expect_throw_with<DataError>([&] { run_replay(build_config(o)); }, "both claim request 1 position 0");
}

}  // namespace
}  // namespace moe::sim
