// `traintl metrics JOB --plot FILE`: the command line, the SVG's structure (a curve per
// rank, metric and attempt; restart markers; escaped text), the PNG's container (chunks,
// CRCs, the stored deflate stream) and pixels, and the errors.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cli/command_line.h"
#include "cli/exit_codes.h"
#include "cli/plot.h"
#include "cli/verbs.h"
#include "common/file_util.h"
#include "scripted_client.h"
#include "test_util.h"

using namespace traintl::cli;
using namespace traintl::cli::testing;
using nlohmann::json;
using traintl::Result;

namespace {

// Two ranks, two attempts (rank 1 restarted too), a bookkeeping metric beside two others.
const char kAnswer[] = R"({"job_id": "3f9c2a1b7d4e", "latest": {"loss": 0.4},
  "history": [
    {"attempt": 1, "seq": 1, "time": 1704164645000, "metrics": {"loss": 0.9, "acc": 0.1, "epoch": 0}},
    {"attempt": 1, "seq": 2, "time": 1704164646000, "metrics": {"loss": 0.7, "acc": 0.3, "epoch": 1}},
    {"attempt": 2, "seq": 3, "time": 1704164650000, "metrics": {"loss": 0.6, "acc": 0.4, "epoch": 1}},
    {"attempt": 2, "seq": 4, "time": 1704164651500, "metrics": {"loss": 0.4, "acc": 0.6, "epoch": 2}}],
  "ranks": {"1": [
    {"attempt": 1, "seq": 1, "time": 1704164645100, "metrics": {"loss": 1.0, "acc": 0.1, "epoch": 0}},
    {"attempt": 2, "seq": 2, "time": 1704164650100, "metrics": {"loss": 0.5, "acc": 0.5, "epoch": 1}}]}})";

PlotResult Plot(const json& answer, PlotFormat format, std::vector<std::string> metrics = {}) {
  Result<PlotResult> r = PlotMetrics(answer, metrics, format);
  INFO(r.status().message());
  REQUIRE(r.ok());
  return std::move(r).value();
}

std::string PlotError(const json& answer, std::vector<std::string> metrics = {}) {
  Result<PlotResult> r = PlotMetrics(answer, metrics, PlotFormat::kSvg);
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

size_t Count(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1))
    ++n;
  return n;
}

// Well-formed XML as far as SVG writers go wrong: tags nest and close, attribute values are
// quoted, every '&' starts one of the five entities, no control characters.
bool WellFormedXml(const std::string& xml, std::string* why) {
  auto entities_ok = [](const std::string& s) {
    for (size_t i = s.find('&'); i != std::string::npos; i = s.find('&', i + 1)) {
      bool known = false;
      for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"})
        known = known || s.compare(i, std::strlen(e), e) == 0;
      if (!known) return false;
    }
    return true;
  };
  std::vector<std::string> open;
  size_t pos = 0;
  if (xml.rfind("<?xml", 0) == 0) pos = xml.find("?>") + 2;
  while (pos < xml.size()) {
    const size_t lt = xml.find('<', pos);
    const std::string text = xml.substr(pos, lt - pos);
    if (text.find('>') != std::string::npos || !entities_ok(text)) {
      *why = "bad text: " + text;
      return false;
    }
    if (lt == std::string::npos) break;
    const size_t gt = xml.find('>', lt);
    if (gt == std::string::npos) {
      *why = "unclosed tag";
      return false;
    }
    std::string tag = xml.substr(lt + 1, gt - lt - 1);
    if (tag.find('<') != std::string::npos || Count(tag, "\"") % 2 != 0 || !entities_ok(tag)) {
      *why = "bad tag: " + tag;
      return false;
    }
    const std::string name =
        tag.substr(tag[0] == '/', tag.find_first_of(" />", 1) - (tag[0] == '/'));
    if (tag[0] == '/') {
      if (open.empty() || open.back() != name) {
        *why = "mismatched </" + name + ">";
        return false;
      }
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(name);
    }
    pos = gt + 1;
  }
  for (unsigned char c : xml) {
    if (c < 0x20 && c != '\n') {
      *why = "control character";
      return false;
    }
  }
  if (!open.empty()) *why = "unclosed <" + open.back() + ">";
  return open.empty();
}

uint32_t BigEndian32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4; ++i) v = v << 8 | static_cast<unsigned char>(s.at(at + i));
  return v;
}

// Bit by bit, unlike the table-driven one under test.
uint32_t SlowCrc32(const std::string& data) {
  uint32_t crc = 0xffffffffu;
  for (unsigned char b : data) {
    crc ^= b;
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
  }
  return ~crc;
}

struct DecodedPng {
  uint32_t width = 0;
  uint32_t height = 0;
  std::vector<std::vector<uint8_t>> rows;  // palette index per pixel
  size_t palette_size = 0;
};

// Checks the container and decodes the 4-bit indexed image (filter None, stored blocks).
DecodedPng DecodePng(const std::string& png) {
  REQUIRE(png.compare(0, 8, std::string("\x89PNG\r\n\x1a\n", 8)) == 0);
  std::map<std::string, std::string> chunks;
  std::vector<std::string> order;
  for (size_t pos = 8; pos < png.size();) {
    REQUIRE(pos + 12 <= png.size());
    const uint32_t length = BigEndian32(png, pos);
    REQUIRE(pos + 12 + length <= png.size());
    const std::string body = png.substr(pos + 4, 4 + length);
    INFO("chunk " << body.substr(0, 4));
    CHECK(BigEndian32(png, pos + 8 + length) == SlowCrc32(body));
    order.push_back(body.substr(0, 4));
    chunks[body.substr(0, 4)] += body.substr(4);
    pos += 12 + length;
  }
  CHECK(order == std::vector<std::string>{"IHDR", "PLTE", "IDAT", "IEND"});
  DecodedPng out;
  const std::string& ihdr = chunks["IHDR"];
  REQUIRE(ihdr.size() == 13);
  out.width = BigEndian32(ihdr, 0);
  out.height = BigEndian32(ihdr, 4);
  CHECK(ihdr.substr(8) == std::string("\x04\x03\x00\x00\x00", 5));
  REQUIRE(chunks["PLTE"].size() % 3 == 0);
  out.palette_size = chunks["PLTE"].size() / 3;
  CHECK(out.palette_size <= 16);

  // zlib: header, stored blocks, Adler-32 of the inflated data.
  const std::string& z = chunks["IDAT"];
  REQUIRE(z.size() >= 2 + 5 + 4);
  CHECK((static_cast<unsigned char>(z[0]) * 256 + static_cast<unsigned char>(z[1])) % 31 == 0);
  CHECK((z[0] & 0x0f) == 8);  // deflate
  std::string raw;
  size_t pos = 2;
  for (bool last = false; !last;) {
    REQUIRE(pos + 5 <= z.size());
    const auto header = static_cast<unsigned char>(z[pos]);
    last = header & 1;
    REQUIRE((header >> 1) == 0);  // BTYPE 00
    const uint32_t len =
        static_cast<unsigned char>(z[pos + 1]) | static_cast<unsigned char>(z[pos + 2]) << 8;
    const uint32_t nlen =
        static_cast<unsigned char>(z[pos + 3]) | static_cast<unsigned char>(z[pos + 4]) << 8;
    REQUIRE(len == (~nlen & 0xffff));
    REQUIRE(pos + 5 + len <= z.size());
    raw += z.substr(pos + 5, len);
    pos += 5 + len;
  }
  REQUIRE(pos + 4 == z.size());
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  CHECK(BigEndian32(z, pos) == (b << 16 | a));

  const size_t row_bytes = (out.width + 1) / 2;
  REQUIRE(raw.size() == out.height * (row_bytes + 1));
  size_t max_index = 0;
  for (uint32_t y = 0; y < out.height; ++y) {
    const size_t at = y * (row_bytes + 1);
    REQUIRE(raw[at] == 0);  // filter None
    std::vector<uint8_t> row;
    for (uint32_t x = 0; x < out.width; ++x) {
      const auto byte = static_cast<unsigned char>(raw[at + 1 + x / 2]);
      row.push_back(x % 2 ? byte & 0x0f : byte >> 4);
      max_index = std::max<size_t>(max_index, row.back());
    }
    out.rows.push_back(std::move(row));
  }
  CHECK(max_index < out.palette_size);
  return out;
}

ScriptedClient Always(int status, const std::string& body) {
  return ScriptedClient(
      [=](const HttpRequest&) -> Result<HttpResponse> { return Json(status, body); });
}

}  // namespace

TEST_CASE("metrics --plot and --metric on the command line") {
  auto cl = ParseCommandLine({"metrics", "3f9c", "--plot", "out.svg"});
  REQUIRE(cl.ok());
  CHECK(cl->metrics.plot == "out.svg");
  CHECK(cl->metrics.metrics.empty());
  cl = ParseCommandLine(
      {"metrics", "--plot=dir/OUT.PNG", "3f9c", "--metric", "loss,acc", "--metric", "lr"});
  REQUIRE(cl.ok());
  CHECK(cl->job == "3f9c");
  CHECK(cl->metrics.metrics == std::vector<std::string>{"loss", "acc", "lr"});

  auto error = [](std::vector<std::string> args) {
    auto r = ParseCommandLine(args);
    REQUIRE_FALSE(r.ok());
    return r.status().message();
  };
  CHECK_THAT(error({"metrics", "3f9c", "--plot", "out.jpg"}),
             Catch::Contains("must end in .svg or .png, got 'out.jpg'"));
  CHECK_THAT(error({"metrics", "3f9c", "--plot", "svg"}), Catch::Contains(".svg or .png"));
  CHECK_THAT(error({"metrics", "3f9c", "--metric", "loss"}),
             Catch::Contains("--metric goes with --plot"));
  CHECK_THAT(error({"metrics", "3f9c", "--plot", "a.svg", "--metric", "loss,,acc"}),
             Catch::Contains("comma-separated"));
  CHECK_THAT(error({"metrics", "3f9c", "--plot", "a.svg", "--metric", "loss,"}),
             Catch::Contains("comma-separated"));
  CHECK_THAT(HelpText("metrics"), Catch::Contains("--plot FILE"));
  CHECK_THAT(HelpText("metrics"), Catch::Contains("--metric NAME[,NAME..]"));
}

TEST_CASE("plot format by extension") {
  CHECK(*PlotFormatForPath("a.svg") == PlotFormat::kSvg);
  CHECK(*PlotFormatForPath("/tmp/x.Svg") == PlotFormat::kSvg);
  CHECK(*PlotFormatForPath("x.png") == PlotFormat::kPng);
  CHECK_FALSE(PlotFormatForPath("x.png.txt").ok());
  CHECK_FALSE(PlotFormatForPath("").ok());
}

TEST_CASE("svg has a curve per rank and metric and attempt") {
  const PlotResult plot = Plot(json::parse(kAnswer), PlotFormat::kSvg);
  const std::string& svg = plot.bytes;
  std::string why;
  const bool well_formed = WellFormedXml(svg, &why);
  INFO(why);
  CHECK(well_formed);
  CHECK_THAT(svg, Catch::StartsWith("<?xml"));
  CHECK(svg.find("href") == std::string::npos);  // nothing external

  // acc and loss; epoch is bookkeeping. 2 ranks x 2 metrics x 2 attempts.
  CHECK(plot.metrics == 2);
  CHECK(Count(svg, "<polyline") == 8);
  CHECK(Count(svg, "data-metric=\"epoch\"") == 0);
  CHECK(Count(svg, "data-metric=\"loss\" data-rank=\"0\" data-attempt=\"1\"") == 1);
  CHECK(Count(svg, "data-metric=\"loss\" data-rank=\"0\" data-attempt=\"2\"") == 1);
  CHECK(Count(svg, "data-metric=\"acc\" data-rank=\"1\" data-attempt=\"2\"") == 1);
  // Rank 1 reported once per attempt: lone points get a dot.
  CHECK(Count(svg, "<circle") == 4);
  CHECK(plot.points == 2 * (4 + 2));

  // Panels in name order, titled; the restart marked in each.
  CHECK(svg.find(">job 3f9c2a1b7d4e: acc</text>") < svg.find(">job 3f9c2a1b7d4e: loss</text>"));
  CHECK(Count(svg, ">attempt 2</text>") == 2);
  CHECK(Count(svg, "stroke-dasharray") == 2 + 1);  // + the legend's sample
  CHECK_THAT(svg, Catch::Contains(">rank 0</text>"));
  CHECK_THAT(svg, Catch::Contains(">rank 1</text>"));
  CHECK_THAT(svg, Catch::Contains(">seconds since the job&apos;s first report</text>"));
  // The x axis reaches the last report, 6.5 s after the first.
  CHECK_THAT(svg, Catch::Contains(">7</text>"));
}

TEST_CASE("plot picks metrics by --metric and names the available ones") {
  const json answer = json::parse(kAnswer);
  const PlotResult plot = Plot(answer, PlotFormat::kSvg, {"loss", "epoch", "loss"});
  CHECK(plot.metrics == 2);
  CHECK(plot.bytes.find(": loss</text>") < plot.bytes.find(": epoch</text>"));
  CHECK(Count(plot.bytes, "data-metric=\"acc\"") == 0);
  CHECK(PlotError(answer, {"los"}) ==
        "unknown metric 'los': job 3f9c2a1b7d4e's reports have acc, epoch, loss");
}

TEST_CASE("plot errors for no reports and no plottable metric") {
  CHECK(PlotError(json::parse(R"({"job_id":"ab12","latest":{},"history":[]})")) ==
        "job ab12 has reported no metrics yet");
  CHECK(PlotError(json::parse(R"({"job_id":"ab12","history":[],"ranks":{}})")) ==
        "job ab12 has reported no metrics yet");
  const json bookkeeping = json::parse(
      R"({"job_id":"ab12","history":[{"attempt":1,"seq":1,"time":5,"metrics":{"epoch":0,"note":"x"}}]})");
  CHECK_THAT(PlotError(bookkeeping), Catch::Contains("only bookkeeping metrics (epoch)"));
  CHECK(Plot(bookkeeping, PlotFormat::kSvg, {"epoch"}).points == 1);
  CHECK_THAT(PlotError(bookkeeping, {"note"}), Catch::Contains("unknown metric 'note'"));
  // A metric the job reported, but only as numbers no chart shows: said so.
  const json huge = json::parse(
      R"({"job_id":"ab12","history":[{"attempt":1,"seq":1,"time":5,"metrics":{"big":1e308}}]})");
  CHECK(PlotError(huge, {"big"}) ==
        "metric 'big' of job ab12 has no value a chart can show (all are infinite, NaN or "
        "beyond +-1e100)");
}

TEST_CASE("plot escapes text and uses the report index for equal times") {
  const json answer = json::parse(R"({"job_id":"j<1>","history":[
    {"attempt":1,"seq":1,"time":7,"metrics":{"a<b&\"c\"\u0001":1.5}},
    {"attempt":1,"seq":2,"time":7,"metrics":{"a<b&\"c\"\u0001":2.5}}]})");
  const std::string svg = Plot(answer, PlotFormat::kSvg).bytes;
  std::string why;
  const bool well_formed = WellFormedXml(svg, &why);
  INFO(why);
  CHECK(well_formed);
  CHECK_THAT(svg, Catch::Contains(">job j&lt;1&gt;: a&lt;b&amp;&quot;c&quot;?</text>"));
  CHECK_THAT(svg, Catch::Contains("data-metric=\"a&lt;b&amp;&quot;c&quot;?\""));
  CHECK_THAT(svg, Catch::Contains(">report number (the reports have no distinct times)</text>"));
  CHECK(Count(svg, "stroke-dasharray") == 0);  // no restart
}

TEST_CASE("png decodes with the curves and markers drawn") {
  const PlotResult plot = Plot(json::parse(kAnswer), PlotFormat::kPng);
  const DecodedPng png = DecodePng(plot.bytes);
  CHECK(png.width == 1000);
  CHECK(png.height > 400);
  CHECK(plot.metrics == 2);
  std::map<int, size_t> pixels;
  for (const auto& row : png.rows) {
    for (uint8_t p : row) ++pixels[p];
  }
  CHECK(pixels[0] > png.width * png.height / 2);  // mostly background
  CHECK(pixels[1] > 1000);                        // text and axes
  CHECK(pixels[3] > 100);                         // restart markers
  CHECK(pixels[4] > 200);                         // rank 0's curves
  CHECK(pixels[5] > 50);                          // rank 1's
}

TEST_CASE("metrics --plot writes the file and says so") {
  TempDir dir;
  auto client = Always(200, kAnswer);
  TestContext t(&client);
  t.ctx.json = true;  // the message, not the answer
  MetricsOptions options;
  options.plot = dir.path() + "/m.png";
  REQUIRE(RunMetrics("3f", t.ctx, options) == kExitOk);
  // --plot draws every rank: it asks for their reports too.
  CHECK(client.requests.at(0).target == "/v1/jobs/3f/metrics?ranks=all");
  CHECK(t.out.str() == "wrote " + options.plot + " (12 points, 2 metrics)\n");
  Result<std::string> png = traintl::ReadFile(options.plot);
  REQUIRE(png.ok());
  CHECK(DecodePng(*png).width == 1000);

  options.plot = dir.path() + "/m.svg";
  options.metrics = {"nope"};
  TestContext t2(&client);
  CHECK(RunMetrics("3f", t2.ctx, options) == kExitUsage);
  CHECK_THAT(t2.err.str(), Catch::Contains("traintl: unknown metric 'nope'"));
  CHECK_FALSE(traintl::PathExists(options.plot));

  auto none = Always(200, R"({"latest":{},"history":[]})");
  TestContext t3(&none);
  options.metrics.clear();
  CHECK(RunMetrics("3f", t3.ctx, options) == kExitNotFound);
  CHECK(t3.err.str() == "traintl: job 3f has reported no metrics yet\n");
  CHECK(t3.out.str().empty());

  TestContext t4(&client);
  options.plot = dir.path() + "/missing/m.svg";
  CHECK(RunMetrics("3f", t4.ctx, options) == kExitUsage);
  CHECK_THAT(t4.err.str(), Catch::Contains("cannot write " + options.plot));
}

TEST_CASE("metrics --rank and --all-ranks print the chosen ranks' reports") {
  auto parsed = ParseCommandLine({"metrics", "3f", "--rank", "2,0"});
  REQUIRE(parsed.ok());
  CHECK(parsed->metrics.ranks == std::vector<int>{0, 2});
  CHECK_FALSE(ParseCommandLine({"metrics", "3f", "--rank", "1", "--all-ranks"}).ok());
  nlohmann::json answer = {
      {"job_id", "3f"},
      {"latest", nlohmann::json::object()},
      {"history", nlohmann::json::array()},
      {"ranks",
       {{"10", {{{"attempt", 1}, {"seq", 0}, {"time", 0}, {"metrics", {{"loss", 0.5}}}}}},
        {"2", {{{"attempt", 2}, {"seq", 3}, {"time", 0}, {"metrics", {{"loss", 0.25}}}}}}}}};
  std::string table = FormatRankMetrics(answer);
  INFO(table);
  // Ranks by number: 2 before 10.
  CHECK(table.find("loss=0.25") < table.find("loss=0.5"));
  CHECK(table.find("RANK") == 0);
  CHECK(FormatRankMetrics({{"ranks", nlohmann::json::object()}}).find("no reports") == 0);
}
