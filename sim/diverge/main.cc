// moe-diverge: the divergence lab on its own (the same command as `moe-sim diverge`).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "sim/diverge/command.h"

int main(int argc, char** argv) {
  CLI::App app{"moe-diverge: same prompt, different answers under continuous batching"};
  moe::sim::add_diverge_command(app);
  app.require_subcommand(0, 1);
  // `moe-diverge [flags]` and `moe-diverge diverge [flags]` both work.
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args.front() != "diverge") args.insert(args.begin(), "diverge");
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::cerr << "moe-diverge: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
