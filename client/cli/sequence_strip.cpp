// kvtierctl sequence CLIENT SEQ: one sequence's placement (PlacementRequest, protocol 1.5, paged
// until done) as a strip of positions by tier, with a legend and per-tier counts.
//
// The strip is at most the terminal's width (--width N, else the terminal's columns, else
// $COLUMNS, else 80) characters; when the sequence is longer each character stands for a bucket
// of ceil(length / width) consecutive positions and shows the tier holding most of them (a tie
// goes to the colder tier: T3 over T2 over T1 over T0). Characters: 0 1 2 for T0 T1 T2, '.' for
// T3 (evicted); on a terminal (stdout a TTY, $NO_COLOR unset) they are coloured too (T0 green,
// T1 yellow, T2 magenta, T3 grey).
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <string>
#include <vector>

#include "commands.hpp"
#include "ctl_support.hpp"
#include "safe_text.hpp"

namespace kvtier::cli {
namespace {

constexpr std::uint32_t kDefaultPageRuns = 4096;
constexpr std::array<char, 4> kTierChar = {'0', '1', '2', '.'};
constexpr std::array<const char*, 4> kTierColour = {"\x1b[32m", "\x1b[33m", "\x1b[35m", "\x1b[90m"};
constexpr std::array<const char*, 4> kTierLabel = {"T0 (HBM)", "T1 (DDR)", "T2 (int8)", "T3 (evicted)"};
constexpr const char* kReset = "\x1b[0m";

struct Placement {
  std::uint32_t length = 0;
  std::uint32_t requests = 0;
  std::vector<kvtier_tier_run> runs;  // adjacent runs of one tier merged
  std::array<std::uint64_t, 4> counts{};
};

// Pages through the placement; a run continuing across pages is merged.
kvtier_status fetch(Client& client, std::uint32_t client_id, std::uint32_t sequence_id, std::uint32_t page_runs,
                    Placement& out) {
  std::uint32_t next = 0;
  for (;;) {
    PlacementPtr page;
    const kvtier_status status = client.sequence_placement(client_id, sequence_id, next, page_runs, page);
    if (status != KVTIER_OK) return status;
    ++out.requests;
    out.length = page->length;
    for (std::size_t i = 0; i < page->run_count; ++i) {
      const kvtier_tier_run& run = page->runs[i];
      out.counts[run.tier] += run.count;  // the library checked tier <= T3
      if (!out.runs.empty() && out.runs.back().tier == run.tier) {
        out.runs.back().count += run.count;
      } else {
        out.runs.push_back(run);
      }
    }
    // The library checked that the page adds up and makes progress unless it is the last.
    if (page->next_position >= page->length) return KVTIER_OK;
    next = page->next_position;
  }
}

unsigned strip_width(unsigned requested) {
  if (requested != 0) return requested;
  if (const unsigned columns = terminal_size().columns; columns != 0) return columns;
  if (const char* env = std::getenv("COLUMNS"); env != nullptr) {
    if (const auto n = parse_u32(env); n && *n > 0) return *n;
  }
  return 80;
}

// One character per bucket of positions: the tier holding most of them, ties to the colder.
std::string render_strip(const Placement& p, unsigned width, bool colour) {
  if (p.length == 0) return "(empty)";
  const std::uint64_t bucket = (std::uint64_t{p.length} + width - 1) / width;
  std::string out;
  std::size_t run = 0;
  std::uint64_t left_in_run = p.runs.empty() ? 0 : p.runs[0].count;
  int shown = -1;
  for (std::uint64_t start = 0; start < p.length; start += bucket) {
    const std::uint64_t size = std::min<std::uint64_t>(bucket, p.length - start);
    std::array<std::uint64_t, 4> in_bucket{};
    for (std::uint64_t need = size; need > 0 && run < p.runs.size();) {
      const std::uint64_t take = std::min(need, left_in_run);
      in_bucket[p.runs[run].tier] += take;
      need -= take;
      left_in_run -= take;
      if (left_in_run == 0 && ++run < p.runs.size()) left_in_run = p.runs[run].count;
    }
    int best = 0;
    for (int t = 1; t < 4; ++t) {
      if (in_bucket[t] >= in_bucket[best]) best = t;
    }
    if (colour && best != shown) out += kTierColour[best];
    shown = best;
    out += kTierChar[best];
  }
  if (colour) out += kReset;
  return out;
}

// The --json document of `sequence` (docs/kvtierctl-json.md).
void write_placement_json(std::uint32_t client_id, std::uint32_t sequence_id, const Placement& p) {
  Json runs = Json::array();
  for (const kvtier_tier_run& run : p.runs) runs.push_back({{"tier", tier_name(run.tier)}, {"count", run.count}});
  print_json(Json{{"client_id", client_id},
                  {"sequence_id", sequence_id},
                  {"length", p.length},
                  {"requests", p.requests},
                  {"counts", {{"t0", p.counts[0]}, {"t1", p.counts[1]}, {"t2", p.counts[2]}, {"t3", p.counts[3]}}},
                  {"runs", std::move(runs)}});
}

void print_placement_text(std::uint32_t client_id, std::uint32_t sequence_id, const Placement& p, unsigned width) {
  const bool colour = ::isatty(STDOUT_FILENO) == 1 && std::getenv("NO_COLOR") == nullptr;
  const std::uint64_t bucket = p.length == 0 ? 1 : (std::uint64_t{p.length} + width - 1) / width;
  std::printf("client %u sequence %u: %u positions in %zu runs", client_id, sequence_id, p.length, p.runs.size());
  if (bucket > 1) std::printf(", each character %llu positions (the tier holding most of them)", ull(bucket));
  std::printf("\n%s\n", render_strip(p, width, colour).c_str());
  for (int t = 0; t < 4; ++t) {
    std::printf("%s%s%c%s %s %llu", t == 0 ? "" : "   ", colour ? kTierColour[t] : "", kTierChar[t], colour ? kReset : "",
                kTierLabel[t], ull(p.counts[t]));
  }
  std::printf("\n");
}

}  // namespace

int run_sequence(const GlobalOptions& options, std::span<const std::string_view> args) {
  std::vector<std::uint32_t> ids;
  unsigned width = 0;
  std::uint32_t page_runs = kDefaultPageRuns;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--width" || arg == "--page-runs") {
      const auto n = i + 1 < args.size() ? parse_u32(args[i + 1]) : std::nullopt;
      if (!n) return usage_error("sequence", std::string(arg) + " needs a number");
      ++i;
      if (arg == "--width") {
        if (*n == 0) return usage_error("sequence", "--width must be at least 1");
        width = *n;
      } else {
        page_runs = *n;  // the range is kvtierd's to check
      }
    } else if (const auto id = parse_u32(arg); id && ids.size() < 2) {
      ids.push_back(*id);
    } else {
      return usage_error("sequence", "unexpected argument '" + printable(arg) + "'");
    }
  }
  if (ids.size() != 2) return usage_error("sequence", "needs CLIENT and SEQ (ids as `kvtierctl status` shows them)");
  Client client;
  kvtier_status status = connect_admin(options, client);
  if (status != KVTIER_OK) return report(status, client);
  Placement placement;
  status = fetch(client, ids[0], ids[1], page_runs, placement);
  if (status != KVTIER_OK) return report(status, client);
  if (options.json) {
    write_placement_json(ids[0], ids[1], placement);
  } else {
    print_placement_text(ids[0], ids[1], placement, strip_width(width));
  }
  return kExitOk;
}

}  // namespace kvtier::cli
