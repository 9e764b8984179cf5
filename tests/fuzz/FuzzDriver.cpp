//===- tests/fuzz/FuzzDriver.cpp - A libFuzzer stand-in for GCC builds ----===//
//
// Runs an LLVMFuzzerTestOneInput harness without libFuzzer: replays every
// corpus file, then mutates corpus inputs at random (bit flips, byte sets,
// interesting integers, inserts, erases, duplicated ranges, splices) for
// --seconds or --runs, seeded by --seed so a run can be repeated exactly;
// with --dict=FILE (libFuzzer's dictionary format) a quarter of the edits
// insert one of its tokens.
// No coverage feedback: the harnesses are written so random mutations of
// their corpora reach deep (structured inputs, fixed checksums).
//
// On a sanitizer report the input being run is written to
// crash-<seed>-<n> (ASan's death callback) so it can be replayed:
//   fuzz_<name> crash-<seed>-<n>
// With --timeout=S (libFuzzer's -timeout), an input that runs longer than
// S seconds is written to slow-<seed>-<n> and the driver exits 70: a hang
// is a finding, saved where it can be replayed.
//
//===----------------------------------------------------------------------===//

#include <csignal>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define BITFOLD_HAVE_DEATH_CALLBACK 1
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *argc,
                                                          char ***argv);

namespace {

using Bytes = std::vector<uint8_t>;

Bytes current; ///< the input being run (for the death callback).
std::string crashName;

/// slow-<seed>-<n>, kept in a fixed buffer: the alarm handler only calls
/// async-signal-safe functions.
char slowName[64];

void setSlowName(uint64_t seed, const char *n) {
  std::snprintf(slowName, sizeof slowName, "slow-%llu-%s",
                (unsigned long long)seed, n);
}

extern "C" void onAlarm(int) {
  int fd = ::open(slowName, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    ssize_t w = ::write(fd, current.data(), current.size());
    (void)w;
    ::close(fd);
  }
  static const char msg[] = "fuzz driver: an input ran past --timeout; "
                            "written to a slow-* file\n";
  ssize_t w = ::write(2, msg, sizeof msg - 1);
  (void)w;
  ::_exit(70);
}

void onDeath() {
  std::FILE *f = std::fopen(crashName.c_str(), "wb");
  if (!f)
    return;
  std::fwrite(current.data(), 1, current.size(), f);
  std::fclose(f);
  std::fprintf(stderr, "fuzz driver: input written to %s\n", crashName.c_str());
}

Bytes readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return Bytes(s.begin(), s.end());
}

void collect(const std::string &path, std::vector<Bytes> &out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    std::fprintf(stderr, "fuzz driver: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  if (!S_ISDIR(st.st_mode)) {
    out.push_back(readFile(path));
    return;
  }
  std::vector<std::string> names;
  if (DIR *d = ::opendir(path.c_str())) {
    while (dirent *e = ::readdir(d))
      if (e->d_name[0] != '.')
        names.push_back(path + "/" + e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  for (const std::string &n : names)
    collect(n, out);
}

/// One random edit of `b`; `pool` gives splice partners.
void mutate(Bytes &b, const std::vector<Bytes> &pool, std::mt19937_64 &rng,
            size_t maxLen) {
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  static const int64_t interesting[] = {0,     -1,         1,          2,
                                        16,    64,         127,        128,
                                        255,   256,        1024,       4096,
                                        32767, 65535,      INT32_MAX,  INT32_MIN,
                                        -128,  1LL << 31,  1LL << 32,  1LL << 40,
                                        INT64_MAX, INT64_MIN};
  switch (rng() % 8) {
  case 0: // flip a bit
    if (!b.empty())
      b[pick(b.size())] ^= uint8_t(1u << (rng() % 8));
    break;
  case 1: // set a byte
    if (!b.empty())
      b[pick(b.size())] = uint8_t(rng());
    break;
  case 2: { // an interesting integer, 1..8 bytes
    if (b.empty())
      break;
    int64_t v = interesting[pick(std::size(interesting))];
    size_t at = pick(b.size()), n = std::min<size_t>(1 + rng() % 8, b.size() - at);
    std::memcpy(&b[at], &v, n);
    break;
  }
  case 3: { // an interesting number as text
    std::string t = std::to_string(interesting[pick(std::size(interesting))]);
    size_t at = pick(b.size() + 1);
    b.insert(b.begin() + at, t.begin(), t.end());
    break;
  }
  case 4: { // insert random bytes
    size_t at = pick(b.size() + 1), n = 1 + rng() % 16;
    for (size_t i = 0; i < n; ++i)
      b.insert(b.begin() + at, uint8_t(rng()));
    break;
  }
  case 5: { // erase a range
    if (b.empty())
      break;
    size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(b.size() - at, 32));
    b.erase(b.begin() + at, b.begin() + at + n);
    break;
  }
  case 6: { // duplicate a range
    if (b.empty())
      break;
    size_t at = pick(b.size()), n = 1 + pick(std::min<size_t>(b.size() - at, 64));
    Bytes part(b.begin() + at, b.begin() + at + n);
    b.insert(b.begin() + pick(b.size() + 1), part.begin(), part.end());
    break;
  }
  default: { // splice with another input
    if (pool.empty())
      break;
    const Bytes &o = pool[pick(pool.size())];
    size_t cut = pick(b.size() + 1), from = pick(o.size() + 1);
    b.resize(cut);
    b.insert(b.end(), o.begin() + from, o.end());
    break;
  }
  }
  if (b.size() > maxLen)
    b.resize(maxLen);
}

/// The tokens of a libFuzzer dictionary (`"token"` or `name="token"` per
/// line, `#` comments, \\, \" and \xNN escapes).
std::vector<Bytes> loadDictionary(const std::string &path) {
  std::vector<Bytes> tokens;
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "fuzz driver: cannot read dictionary %s\n",
                 path.c_str());
    std::exit(2);
  }
  std::string line;
  while (std::getline(in, line)) {
    size_t open = line.find('"'), close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos ||
        close <= open)
      continue;
    Bytes t;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] == '\\' && i + 3 < close && line[i + 1] == 'x') {
        t.push_back(uint8_t(std::stoul(line.substr(i + 2, 2), nullptr, 16)));
        i += 3;
      } else if (line[i] == '\\' && i + 1 < close) {
        t.push_back(uint8_t(line[++i]));
      } else {
        t.push_back(uint8_t(line[i]));
      }
    }
    tokens.push_back(std::move(t));
  }
  return tokens;
}

/// Inserts a dictionary token at a random place (or overwrites there).
void insertToken(Bytes &b, const std::vector<Bytes> &dictionary,
                 std::mt19937_64 &rng, size_t maxLen) {
  const Bytes &t = dictionary[rng() % dictionary.size()];
  size_t at = b.empty() ? 0 : size_t(rng() % (b.size() + 1));
  if (rng() % 2 && at + t.size() <= b.size())
    std::copy(t.begin(), t.end(), b.begin() + at);
  else
    b.insert(b.begin() + at, t.begin(), t.end());
  if (b.size() > maxLen)
    b.resize(maxLen);
}

uint64_t flagValue(const char *arg, const char *name, uint64_t fallback) {
  size_t n = std::strlen(name);
  return std::strncmp(arg, name, n) == 0 ? std::strtoull(arg + n, nullptr, 10)
                                         : fallback;
}

} // namespace

int main(int argc, char **argv) {
  uint64_t seconds = 0, runs = 0, seed = 1, maxLen = 4096, timeout = 0;
  std::vector<std::string> paths;
  std::vector<Bytes> dictionary;
  for (int i = 1; i < argc; ++i) {
    const char *a = argv[i];
    if (std::strncmp(a, "--dict=", 7) == 0) {
      dictionary = loadDictionary(a + 7);
      continue;
    }
    if (a[0] == '-' && a[1] == '-') {
      seconds = flagValue(a, "--seconds=", seconds);
      runs = flagValue(a, "--runs=", runs);
      seed = flagValue(a, "--seed=", seed);
      maxLen = flagValue(a, "--max-len=", maxLen);
      timeout = flagValue(a, "--timeout=", timeout);
      continue;
    }
    paths.push_back(a);
  }
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
#ifdef BITFOLD_HAVE_DEATH_CALLBACK
  __sanitizer_set_death_callback(onDeath);
#endif
  std::vector<Bytes> corpus;
  for (const std::string &p : paths)
    collect(p, corpus);
  if (timeout)
    std::signal(SIGALRM, onAlarm);
  crashName = "crash-" + std::to_string(seed) + "-replay";
  setSlowName(seed, "replay");
  for (const Bytes &b : corpus) {
    current = b;
    alarm(unsigned(timeout));
    LLVMFuzzerTestOneInput(current.data(), current.size());
  }
  std::mt19937_64 rng(seed);
  auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
        .count();
  };
  uint64_t n = 0;
  for (; (runs && n < runs) || (!runs && seconds && elapsed() < double(seconds));
       ++n) {
    current = corpus.empty() ? Bytes() : corpus[rng() % corpus.size()];
    for (int edits = 1 + int(rng() % 6); edits > 0; --edits)
      if (!dictionary.empty() && rng() % 4 == 0)
        insertToken(current, dictionary, rng, maxLen);
      else
        mutate(current, corpus, rng, maxLen);
    crashName = "crash-" + std::to_string(seed) + "-" + std::to_string(n);
    setSlowName(seed, std::to_string(n).c_str());
    alarm(unsigned(timeout));
    LLVMFuzzerTestOneInput(current.data(), current.size());
  }
  alarm(0);
  std::printf("fuzz driver: replayed %zu corpus inputs; %llu mutated runs in "
              "%.1f s (seed %llu); no crash\n",
              corpus.size(), (unsigned long long)n, elapsed(),
              (unsigned long long)seed);
  return 0;
}
