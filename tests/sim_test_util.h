// Helpers shared by the sim tests: a scratch directory and small file writers.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace moe::sim::testing {

// A fresh directory per test, removed afterwards.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() / ("moe_sim_" + std::string(info->test_suite_name()) +
                                                      "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream out(file(name), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Expects `fn` to throw E with `substring` in what().
template <typename E, typename Fn>
void expect_throw_with(Fn&& fn, const std::string& substring) {
  try {
    fn();
    ADD_FAILURE() << "expected an exception containing '" << substring << "'";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(substring), std::string::npos)
        << "message '" << e.what() << "' lacks '" << substring << "'";
  }
}

}  // namespace moe::sim::testing
