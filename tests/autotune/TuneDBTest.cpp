//===- tests/autotune/TuneDBTest.cpp - Tune DB: JSON, merge, staleness ----===//

#include "TestEnv.h"

#include "llvm/Support/raw_ostream.h"

using namespace bitfold::autotune;
using namespace bitfold::autotune::test;

namespace {

TuneDB dbA() {
  TuneDB db;
  db.record(keyFor("h1", "c4096.a16-16-16-16.o32/r4096"), "r1.t128.v8.p1",
            {meas("r1.t128.v8.p1", 30.0), meas("r2.t64.v8.p1", 25.5),
             meas("r1.t256.v8.p2", 60.0, 5, 1.0, true)});
  db.record(keyFor("h2", "c128.a16-16.o32/r1"), "r8.t32.v4.p1",
            {meas("r8.t32.v4.p1", 3.0)});
  return db;
}

TuneDB dbB() {
  TuneDB db;
  // Same key and config as A, more samples: wins the merge.
  db.record(keyFor("h1", "c4096.a16-16-16-16.o32/r4096"), "r1.t128.v8.p1",
            {meas("r1.t128.v8.p1", 31.0, 40), meas("r4.t32.v8.p1", 24.0)});
  // Another GPU: its own entry.
  TuneEnvironment a100{"NVIDIA A100-SXM4-80GB", "sm_80", "0.1.0", "22.1.8",
                       "nvJitLink 13.0"};
  db.record(keyFor("h1", "c4096.a16-16-16-16.o32/r4096", a100),
            "r1.t128.v8.p1", {meas("r1.t128.v8.p1", 50.0)});
  return db;
}

TEST(TuneDB, RoundTripsThroughJsonByteForByte) {
  TuneDB a = dbA();
  std::string text = a.toJsonText();
  auto back = TuneDB::fromJsonText(text);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->toJsonText(), text);
  auto l = back->lookup(keyFor("h1", "c4096.a16-16-16-16.o32/r4096"));
  ASSERT_EQ(l.kind, Lookup::Hit);
  ASSERT_EQ(l.entry->measurements.size(), 3u);
  const Measurement *cut = l.entry->find("r1.t256.v8.p2");
  ASSERT_NE(cut, nullptr);
  EXPECT_TRUE(cut->cut);
  EXPECT_EQ(cut->samples, 5);
  EXPECT_EQ(l.entry->defaultConfig, "r1.t128.v8.p1");
}

TEST(TuneDB, SavesAndLoadsAFile) {
  TempDir dir;
  std::string path = dir.file("sub/tune-db.json");
  ASSERT_FALSE(bool(dbA().save(path)));
  auto back = TuneDB::load(path);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(*back, dbA());
  auto none = TuneDB::loadOrEmpty(dir.file("missing.json"));
  ASSERT_TRUE(bool(none));
  EXPECT_EQ(none->size(), 0u);
}

TEST(TuneDB, RejectsMalformedFilesWithAReason) {
  auto notJson = TuneDB::fromJsonText("{");
  ASSERT_FALSE(bool(notJson));
  EXPECT_NE(llvm::toString(notJson.takeError()).find("not valid JSON"),
            std::string::npos);
  auto wrong = TuneDB::fromJsonText(R"({"format":"bitfold-tune-db","version":1,
      "entries":[{"key":{"kernel":"k"},"measurements":[]}]})");
  ASSERT_FALSE(bool(wrong));
  EXPECT_NE(llvm::toString(wrong.takeError()).find("kernelHash"),
            std::string::npos);
  auto future = TuneDB::fromJsonText(
      R"({"format":"bitfold-tune-db","version":99,"entries":[]})");
  ASSERT_FALSE(bool(future));
  llvm::consumeError(future.takeError());
}

TEST(TuneDB, WinnerIsFastestFullyTimedConfig) {
  TuneDB a = dbA();
  auto l = a.lookup(keyFor("h1", "c4096.a16-16-16-16.o32/r4096"));
  ASSERT_EQ(l.kind, Lookup::Hit);
  ASSERT_NE(l.entry->winner(), nullptr);
  EXPECT_EQ(l.entry->winner()->config, "r2.t64.v8.p1");
}

TEST(TuneDB, MergeIsCommutative) {
  TuneDB ab = dbA();
  ab.merge(dbB());
  TuneDB ba = dbB();
  ba.merge(dbA());
  EXPECT_EQ(ab.toJsonText(), ba.toJsonText());
}

TEST(TuneDB, MergeIsIdempotentAndAssociative) {
  TuneDB aa = dbA();
  aa.merge(dbA());
  EXPECT_EQ(aa, dbA());
  TuneDB ab = dbA();
  ab.merge(dbB());
  TuneDB abb = ab;
  abb.merge(dbB());
  EXPECT_EQ(abb, ab);
  TuneDB c;
  c.record(keyFor("h3", "c2240.a16-16-16-16.o32/r2048"), "r1.t128.v8.p1",
           {meas("r1.t128.v8.p1", 9.0)});
  TuneDB left = dbA(); // (A+B)+C
  left.merge(dbB());
  left.merge(c);
  TuneDB bc = dbB(); // A+(B+C)
  bc.merge(c);
  TuneDB right = dbA();
  right.merge(bc);
  EXPECT_EQ(left, right);
}

TEST(TuneDB, MergeKeepsMoreSamplesThenLowerMedianThenLowerSpread) {
  TuneDB ab = dbA();
  ab.merge(dbB());
  auto l = ab.lookup(keyFor("h1", "c4096.a16-16-16-16.o32/r4096"));
  ASSERT_EQ(l.kind, Lookup::Hit);
  const Measurement *m = l.entry->find("r1.t128.v8.p1");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->samples, 40); // more samples beats lower median
  EXPECT_EQ(m->medianUs, 31.0);

  EXPECT_TRUE(meas("c", 10.0, 20).preferredOver(meas("c", 11.0, 20)));
  EXPECT_TRUE(meas("c", 10.0, 20, 0.1).preferredOver(meas("c", 10.0, 20, 0.2)));
  Measurement x = meas("c", 10.0), y = meas("c", 10.0);
  y.maxUs += 1; // differs only in the text: still a strict order
  EXPECT_NE(x.preferredOver(y), y.preferredOver(x));
}

TEST(TuneDB, AddingAConfigKeepsOldTimings) {
  TuneDB db = dbA();
  auto key = keyFor("h1", "c4096.a16-16-16-16.o32/r4096");
  db.record(key, "", {meas("r8.t32.v8.p1", 20.0)});
  auto l = db.lookup(key);
  ASSERT_EQ(l.kind, Lookup::Hit);
  EXPECT_EQ(l.entry->measurements.size(), 4u);
  EXPECT_NE(l.entry->find("r1.t128.v8.p1"), nullptr);
  EXPECT_EQ(l.entry->winner()->config, "r8.t32.v8.p1");
  EXPECT_EQ(l.entry->defaultConfig, "r1.t128.v8.p1"); // kept
}

TEST(TuneDB, EntryFromAnotherGpuIsStaleWithTheReason) {
  TuneDB db;
  TuneEnvironment a100{"NVIDIA A100-SXM4-80GB", "sm_80", "0.1.0", "22.1.8",
                       "nvJitLink 13.0"};
  db.record(keyFor("h1", "cls", a100), "r1.t128.v8.p1", {meas("r1.t128.v8.p1", 5)});
  Lookup l = db.lookup(keyFor("h1", "cls"));
  EXPECT_EQ(l.kind, Lookup::Stale);
  EXPECT_NE(l.reason.find("NVIDIA A100-SXM4-80GB"), std::string::npos);
  EXPECT_NE(l.reason.find("NVIDIA H200"), std::string::npos);
}

TEST(TuneDB, EntryFromAnotherVersionIsStaleWithTheReason) {
  TuneDB db;
  TuneEnvironment old = h200();
  old.bitfoldVersion = "0.0.9";
  old.toolchain = "ptxas 12.4";
  db.record(keyFor("h1", "cls", old), "r1.t128.v8.p1", {meas("r1.t128.v8.p1", 5)});
  Lookup l = db.lookup(keyFor("h1", "cls"));
  EXPECT_EQ(l.kind, Lookup::Stale);
  EXPECT_NE(l.reason.find("bitfold '0.0.9'"), std::string::npos) << l.reason;
  EXPECT_NE(l.reason.find("ptxas 12.4"), std::string::npos) << l.reason;
}

TEST(TuneDB, OtherShapeClassOrKernelIsAMiss) {
  TuneDB db = dbA();
  EXPECT_EQ(db.lookup(keyFor("h1", "c4096.a16-16-16-16.o32/r8192")).kind,
            Lookup::Miss);
  EXPECT_EQ(db.lookup(keyFor("h9", "c4096.a16-16-16-16.o32/r4096")).kind,
            Lookup::Miss);
}

} // namespace

// ---- Strict types and ranges -------------------------------------------------

namespace {

/// A one-measurement DB whose measurement has `field` set to `value` (JSON
/// text), and top-level `format` / `version` as given.
std::string dbText(const std::string &field, const std::string &value,
                   const std::string &format = "\"bitfold-tune-db\"",
                   const std::string &version = "1") {
  std::string m = R"({"config":"r1.t128.v8.p1","medianUs":30.0,"spreadUs":1.0,)"
                  R"("minUs":29.0,"maxUs":31.0,"samples":20,"cut":false})";
  if (!field.empty()) {
    size_t at = m.find("\"" + field + "\":");
    size_t from = at + field.size() + 3;
    size_t to = m.find_first_of(",}", from);
    m = m.substr(0, from) + value + m.substr(to);
  }
  return R"({"format":)" + format + R"(,"version":)" + version +
         R"(,"entries":[{"key":{"kernel":"k","kernelHash":"h","shapeClass":"c",)"
         R"("dtypes":"x:bf16","gpu":"g","arch":"sm_90","bitfold":"0.1.0",)"
         R"("llvm":"22","toolchain":"t"},"defaultConfig":"r1.t128.v8.p1",)"
         R"("measurements":[)" +
         m + "]}]}";
}

void expectRejected(const std::string &text, const std::string &why) {
  auto db = TuneDB::fromJsonText(text);
  ASSERT_FALSE(bool(db)) << "accepted: " << text << "\nas:\n"
                         << db->toJsonText();
  std::string msg = llvm::toString(db.takeError());
  EXPECT_NE(msg.find(why), std::string::npos) << msg << "\nfor " << text;
}

} // namespace

TEST(TuneDBStrict, TheBaseTextIsValid) {
  auto db = TuneDB::fromJsonText(dbText("", ""));
  ASSERT_TRUE(bool(db)) << llvm::toString(db.takeError());
  EXPECT_EQ(db->size(), 1u);
}

TEST(TuneDBStrict, NonStringFormatIsAnErrorNotAnException) {
  expectRejected(dbText("", "", "1"), "not a bitfold tune DB");
  expectRejected(dbText("", "", "null"), "not a bitfold tune DB");
  expectRejected(dbText("", "", "[\"bitfold-tune-db\"]"), "not a bitfold tune DB");
}

TEST(TuneDBStrict, NumbersAreNeverRoundedOrWrapped) {
  expectRejected(dbText("samples", "1e30"), "'samples' must be an integer");
  expectRejected(dbText("samples", "1099511627776"), "'samples' must be an integer");
  expectRejected(dbText("samples", "-3"), "'samples' must be an integer");
  expectRejected(dbText("samples", "2.5"), "'samples' must be an integer");
  expectRejected(dbText("samples", "\"20\""), "'samples' must be an integer");
  expectRejected(dbText("", "", "\"bitfold-tune-db\"", "1.9"),
                 "'version' must be an integer");
  expectRejected(dbText("", "", "\"bitfold-tune-db\"", "4294967297"),
                 "'version' must be an integer");
}

TEST(TuneDBStrict, TimingsMustBeFiniteAndNonNegative) {
  expectRejected(dbText("medianUs", "-1.0"), "'medianUs' must be a finite number >= 0");
  expectRejected(dbText("maxUs", "-0.5"), "'maxUs' must be a finite number >= 0");
  expectRejected(dbText("spreadUs", "true"), "'spreadUs' must be a finite number");
  expectRejected(dbText("cut", "0"), "'cut' must be true or false");
  expectRejected(dbText("config", "7"), "'config' must be a string");
}

TEST(TuneDBStrict, AMedianOutsideMinAndMaxIsRejected) {
  expectRejected(dbText("medianUs", "28.0"),
                 "needs minUs <= medianUs <= maxUs, found 29.0 <= 28.0 <= 31.0");
  expectRejected(dbText("minUs", "32.0"), "needs minUs <= medianUs <= maxUs");
  expectRejected(dbText("maxUs", "29.5"), "needs minUs <= medianUs <= maxUs");
}

TEST(TuneDBStrict, DuplicateKeysAreRejectedNotResolvedByTheLastOne) {
  std::string text = dbText("", "");
  std::string twice = text;
  twice.replace(twice.find("\"medianUs\":30.0"), 15,
                "\"medianUs\":30.0,\"medianUs\":1.0");
  expectRejected(twice, "the key \"medianUs\" appears twice in one object");
  std::string arch = text;
  arch.replace(arch.find("\"arch\":\"sm_90\""), 14,
               "\"arch\":\"sm_90\",\"arch\":\"sm_80\"");
  expectRejected(arch, "the key \"arch\" appears twice");
}

TEST(TuneDBStrict, AConfigNameThatIsNoTileConfigIsRejected) {
  expectRejected(dbText("config", "\"fastest\""),
                 "measurement 'fastest': not a tile config");
  expectRejected(dbText("config", "\"r1.t0.v8.p1\""), "not a tile config");
  std::string text = dbText("", "");
  text.replace(text.find("\"defaultConfig\":\"r1.t128.v8.p1\""), 31,
               "\"defaultConfig\":\"fastest\"");
  expectRejected(text, "defaultConfig 'fastest' is not a tile config");
}

TEST(TuneDBStrict, MergeRefusesABadInputAndWritesNothing) {
  TempDir dir;
  std::string good = dir.file("good.json"), bad = dir.file("bad.json"),
              out = dir.file("out.json");
  ASSERT_FALSE(bool(dbA().save(good)));
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(bad, ec);
    os << dbText("samples", "1e30");
  }
  auto merged = TuneDB::mergeFiles({good, bad}, out);
  ASSERT_FALSE(bool(merged));
  std::string msg = llvm::toString(merged.takeError());
  EXPECT_NE(msg.find(bad), std::string::npos) << msg;
  EXPECT_NE(msg.find("nothing written"), std::string::npos) << msg;
  EXPECT_FALSE(llvm::sys::fs::exists(out));
  // Good inputs merge and round-trip unchanged.
  auto ok = TuneDB::mergeFiles({good}, out);
  ASSERT_TRUE(bool(ok)) << llvm::toString(ok.takeError());
  auto back = TuneDB::load(out);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(*back, dbA());
}
