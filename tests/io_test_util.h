// Helpers shared by the moe/io tests: scratch directories and hand-made (possibly corrupt) files.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace moe::io::testing {

// A fresh directory per test, removed afterwards.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() / ("moe_io_" + std::string(info->test_suite_name()) + "_" +
                                                      info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A safetensors file from a raw header string and a data area: [u64 LE header_len_field][header][data].
inline std::string raw_safetensors(const std::string& header, const std::string& data,
                                   uint64_t header_len_field) {
  std::string out(8, '\0');
  std::memcpy(out.data(), &header_len_field, 8);
  return out + header + data;
}
inline std::string raw_safetensors(const std::string& header, const std::string& data) {
  return raw_safetensors(header, data, header.size());
}

// Runs `fn`, expects it to throw `Exception`, and returns the message (empty if it did not throw).
template <typename Exception, typename Fn>
std::string thrown_message(Fn&& fn) {
  try {
    fn();
  } catch (const Exception& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

}  // namespace moe::io::testing
