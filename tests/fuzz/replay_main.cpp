// The plain fuzz driver (any compiler; with the sanitizers of CAKEMOE_SANITIZE when built so).
// Replays files and folders of inputs, then optionally mutates them for a time or a number of
// inputs, keeping mutants that reach a new outcome (entry + error message, digits ignored) as a
// coverage stand-in. A failing input is written to the crash folder before the process dies.
//
//   cakemoe_fuzz_replay [--verbose] [--seconds N] [--iterations N] [--seed N] [--timeout S]
//                       [--max-len N] [--crash-dir DIR] PATH...
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "fuzz_one.h"

extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

// The input being run, kept where a signal handler can write it out.
constexpr size_t kMaxLen = 1 << 16;
uint8_t g_current[kMaxLen];
size_t g_current_len = 0;
char g_crash_path[4096] = "crash-input";

void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void say(const char* text) { write_all(2, text, std::strlen(text)); }

// Async-signal-safe: open / write / close only.
void dump_current_input() {
  const int fd = open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    write_all(fd, g_current, g_current_len);
    close(fd);
  }
  say("cakemoe fuzz: the failing input is in ");
  say(g_crash_path);
  say("\n");
}

void on_deadly_signal(int sig) {
  say(sig == SIGALRM ? "cakemoe fuzz: timeout (hang?)\n" : "cakemoe fuzz: deadly signal\n");
  dump_current_input();
  if (sig == SIGALRM) _exit(70);
  signal(sig, SIG_DFL);
  raise(sig);
}

void install_handlers() {
  const bool sanitizer = __sanitizer_set_death_callback != nullptr;
  if (sanitizer) __sanitizer_set_death_callback(dump_current_input);
  // The sanitizers handle SEGV / BUS / FPE themselves (and call the death callback).
  for (int sig : {SIGABRT, SIGALRM, SIGSEGV, SIGBUS, SIGFPE, SIGILL}) {
    if (sanitizer && sig != SIGABRT && sig != SIGALRM) continue;
    signal(sig, on_deadly_signal);
  }
}

struct Options {
  bool verbose = false;
  double seconds = 0;
  long long iterations = 0;
  unsigned long long seed = 0;
  unsigned timeout = 20;
  size_t max_len = 512;
  std::string crash_dir = ".";
  std::vector<std::string> paths;
};

uint64_t fnv1a(const Bytes& b) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t c : b) h = (h ^ c) * 1099511628211ull;
  return h;
}

cakemoe::fuzz::Outcome run(const Bytes& input, const Options& opt) {
  g_current_len = std::min(input.size(), kMaxLen);
  std::memcpy(g_current, input.data(), g_current_len);
  std::snprintf(g_crash_path, sizeof(g_crash_path), "%s/crash-%016llx", opt.crash_dir.c_str(),
                static_cast<unsigned long long>(fnv1a(input)));
  alarm(opt.timeout);
  cakemoe::fuzz::Outcome outcome = cakemoe::fuzz::run_one(input.data(), input.size());
  alarm(0);
  return outcome;
}

// Entry + message with digits dropped: which check fired, not with which numbers.
std::string outcome_key(const cakemoe::fuzz::Outcome& o) {
  std::string key = std::string(o.entry) + (o.rejected ? ": " : ": ok");
  for (char c : o.message) {
    if (c < '0' || c > '9') key.push_back(c);
  }
  return key;
}

Bytes read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

Bytes mutate(const std::vector<Bytes>& corpus, std::mt19937_64& rng, size_t max_len) {
  const auto pick = [&](size_t n) { return n == 0 ? 0 : static_cast<size_t>(rng() % n); };
  if (corpus.empty() || rng() % 10 == 0) {  // fresh random input
    Bytes b(1 + pick(64));
    for (auto& c : b) c = static_cast<uint8_t>(rng());
    return b;
  }
  Bytes b = corpus[pick(corpus.size())];
  const int rounds = 1 + static_cast<int>(pick(6));
  static const uint8_t kTags[] = {0x00, 0x01, 0x02, 0x07, 0x08, 0x10, 0x3F, 0x40, 0x80, 0xA0,
                                  0xA1, 0xB0, 0xC0, 0xC1, 0xC4, 0xC5, 0xC8, 0xCC, 0xD0, 0xFF};
  for (int r = 0; r < rounds; ++r) {
    const size_t at = pick(b.size() + 1);
    switch (pick(7)) {
      case 0:
        if (at < b.size()) b[at] ^= static_cast<uint8_t>(1u << pick(8));
        break;
      case 1:
        if (at < b.size()) b[at] = static_cast<uint8_t>(rng());
        break;
      case 2:
        if (at < b.size()) b[at] = kTags[pick(sizeof(kTags))];
        break;
      case 3:
        b.insert(b.begin() + static_cast<long>(at), kTags[pick(sizeof(kTags))]);
        break;
      case 4:
        if (at < b.size()) b.erase(b.begin() + static_cast<long>(at));
        break;
      case 5: {  // splice the tail of another input
        const Bytes& other = corpus[pick(corpus.size())];
        const size_t from = pick(other.size() + 1);
        b.resize(std::min(at, b.size()));
        b.insert(b.end(), other.begin() + static_cast<long>(from), other.end());
        break;
      }
      default:
        if (!b.empty()) b[pick(std::min<size_t>(b.size(), 12))] = static_cast<uint8_t>(rng());
    }
  }
  if (b.size() > max_len) b.resize(max_len);
  return b;
}

int usage() {
  std::fprintf(stderr,
               "usage: cakemoe_fuzz_replay [--verbose] [--seconds N] [--iterations N] "
               "[--seed N] [--timeout S] [--max-len N] [--crash-dir DIR] PATH...\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--verbose")
      opt.verbose = true;
    else if (a == "--seconds" && has_value)
      opt.seconds = std::atof(argv[++i]);
    else if (a == "--iterations" && has_value)
      opt.iterations = std::atoll(argv[++i]);
    else if (a == "--seed" && has_value)
      opt.seed = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--timeout" && has_value)
      opt.timeout = static_cast<unsigned>(std::atoi(argv[++i]));
    else if (a == "--max-len" && has_value)
      opt.max_len = std::strtoull(argv[++i], nullptr, 0);
    else if (a == "--crash-dir" && has_value)
      opt.crash_dir = argv[++i];
    else if (!a.empty() && a[0] == '-')
      return usage();
    else
      opt.paths.push_back(a);
  }
  cakemoe::fuzz::init_fuzzing();
  install_handlers();

  std::vector<fs::path> files;
  for (const auto& p : opt.paths) {
    if (fs::is_directory(p)) {
      for (const auto& e : fs::directory_iterator(p)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else if (fs::exists(p)) {
      files.push_back(p);
    } else {
      std::fprintf(stderr, "cakemoe fuzz: no such input: %s\n", p.c_str());
      return 2;
    }
  }
  std::sort(files.begin(), files.end());

  std::vector<Bytes> corpus;
  std::set<std::string> seen;
  std::map<std::string, int> ok_by_entry, rejected_by_entry;
  for (const auto& f : files) {
    const Bytes input = read_file(f);
    const cakemoe::fuzz::Outcome o = run(input, opt);
    (o.rejected ? rejected_by_entry : ok_by_entry)[o.entry]++;
    if (opt.verbose) {
      std::printf("%s: %s: %s\n", f.filename().c_str(), o.entry,
                  o.rejected ? o.message.c_str() : "ok");
    }
    corpus.push_back(input);
    seen.insert(outcome_key(o));
  }
  std::printf("cakemoe fuzz: replayed %zu inputs (%zu distinct outcomes)\n", files.size(),
              seen.size());
  for (const auto& [entry, n] : ok_by_entry) std::printf("  %-20s ok %d\n", entry.c_str(), n);

  if (opt.seconds <= 0 && opt.iterations <= 0) return 0;
  if (opt.seed == 0) {
    opt.seed = static_cast<unsigned long long>(
        std::chrono::steady_clock::now().time_since_epoch().count());
  }
  std::printf("cakemoe fuzz: mutating for %.0f s / %lld inputs, seed %llu\n", opt.seconds,
              opt.iterations, opt.seed);
  std::fflush(stdout);
  std::mt19937_64 rng(opt.seed);
  const auto start = std::chrono::steady_clock::now();
  auto last_report = start;
  long long n = 0;
  for (;; ++n) {
    const auto now = std::chrono::steady_clock::now();
    const double elapsed = std::chrono::duration<double>(now - start).count();
    if (opt.seconds > 0 && elapsed >= opt.seconds) break;
    if (opt.iterations > 0 && n >= opt.iterations) break;
    if (std::chrono::duration<double>(now - last_report).count() >= 10) {
      std::printf("  %lld inputs, %zu outcomes, %.0f inputs/s\n", n, seen.size(), n / elapsed);
      std::fflush(stdout);
      last_report = now;
    }
    const Bytes input = mutate(corpus, rng, opt.max_len);
    const cakemoe::fuzz::Outcome o = run(input, opt);
    if (seen.insert(outcome_key(o)).second && corpus.size() < 20000) corpus.push_back(input);
  }
  std::printf("cakemoe fuzz: %lld mutated inputs, no failure; %zu distinct outcomes\n", n,
              seen.size());
  return 0;
}
