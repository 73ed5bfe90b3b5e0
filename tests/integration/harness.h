#pragma once
// Runs the kfab binary as a user would and collects what it printed and how it ended.

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "core/hash.h"
#include "core/process.h"

namespace kfab::test {

struct CliResult {
  ExitStatus status;
  std::string out;
  std::string err;
  double seconds = 0.0;
  nlohmann::json json() const {
    try {
      return nlohmann::json::parse(out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "stdout is not JSON: " << e.what() << "\n" << out << "\nstderr: " << err;
      return {};
    }
  }
};

inline std::filesystem::path scratch() {
  static const auto dir = [] {
    auto d = std::filesystem::temp_directory_path() / ("kfab-it-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `kfab ARGS` with a private store and a compile cache shared by the test run.
inline CliResult kfab_cli(const std::vector<std::string>& args, double timeout_s = 300) {
  static int counter = 0;
  const auto out = scratch() / ("out" + std::to_string(++counter));
  const auto err = scratch() / ("err" + std::to_string(counter));
  std::string cmd = "KFAB_CACHE_DIR=" + quote(std::string(KFAB_BINARY) + ".test-cache") + " KFAB_DATA_DIR=" +
                    quote((scratch() / "data").string()) + " exec " + quote(KFAB_BINARY);
  for (const auto& a : args) cmd += " " + quote(a);
  cmd += " >" + quote(out.string()) + " 2>" + quote(err.string());
  const auto start = std::chrono::steady_clock::now();
  auto r = run_command({"/bin/sh", "-c", cmd}, timeout_s, KFAB_SOURCE_DIR);
  CliResult c;
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (r) c.status = r->status;
  c.out = read_file(out).has_value() ? *read_file(out) : "";
  c.err = read_file(err).has_value() ? *read_file(err) : "";
  return c;
}

inline std::string fixture(const std::string& rel) { return std::string(KFAB_TEST_FIXTURES) + "/" + rel; }

}  // namespace kfab::test
