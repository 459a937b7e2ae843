#include "sim/length_dist.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "sim/errors.h"
#include "sim/text.h"

namespace moe::sim {
namespace {

[[noreturn]] void bad(std::string_view spec, const std::string& why) {
  throw UsageError("bad length distribution '" + std::string(spec) + "': " + why +
                   " (expected fixed:N, uniform:A,B or lognormal:mean=M,sigma=S[,max=X])");
}

}  // namespace

LengthDist LengthDist::parse(std::string_view spec) {
  LengthDist d;
  const size_t colon = spec.find(':');
  const std::string_view kind = colon == std::string_view::npos ? "fixed" : spec.substr(0, colon);
  const std::string_view args = colon == std::string_view::npos ? spec : spec.substr(colon + 1);
  const auto parts = split(args, ',');
  try {
    if (kind == "fixed") {
      if (parts.size() != 1) bad(spec, "fixed takes one value");
      d.kind = Kind::kFixed;
      d.a = parse_int(parts[0], "length");
      if (d.a < 0) bad(spec, "length must be >= 0");
    } else if (kind == "uniform") {
      if (parts.size() != 2) bad(spec, "uniform takes two values A,B");
      d.kind = Kind::kUniform;
      d.a = parse_int(parts[0], "lower bound");
      d.b = parse_int(parts[1], "upper bound");
      if (d.a < 0 || d.b < d.a) bad(spec, "need 0 <= A <= B");
    } else if (kind == "lognormal") {
      d.kind = Kind::kLognormal;
      bool has_mean = false, has_sigma = false;
      for (const auto& p : parts) {
        const size_t eq = p.find('=');
        if (eq == std::string::npos) bad(spec, "lognormal parameters are key=value");
        const std::string key = p.substr(0, eq), value = p.substr(eq + 1);
        if (key == "mean") {
          d.mean = parse_double(value, "mean");
          has_mean = true;
        } else if (key == "sigma") {
          d.sigma = parse_double(value, "sigma");
          has_sigma = true;
        } else if (key == "max") {
          d.max = parse_int(value, "max");
        } else {
          bad(spec, "unknown lognormal parameter '" + key + "'");
        }
      }
      if (!has_mean || !has_sigma) bad(spec, "lognormal needs mean= and sigma=");
      if (!(d.mean > 0.0) || !std::isfinite(d.mean)) bad(spec, "mean must be > 0");
      if (!(d.sigma >= 0.0) || !std::isfinite(d.sigma)) bad(spec, "sigma must be >= 0");
      if (d.max < 0) bad(spec, "max must be >= 0");
    } else {
      bad(spec, "unknown kind '" + std::string(kind) + "'");
    }
  } catch (const UsageError& e) {
    const std::string what = e.what();
    if (what.rfind("bad length distribution", 0) == 0) throw;
    bad(spec, what);
  }
  return d;
}

std::string LengthDist::to_string() const {
  std::ostringstream s;
  switch (kind) {
    case Kind::kFixed:
      s << "fixed:" << a;
      break;
    case Kind::kUniform:
      s << "uniform:" << a << "," << b;
      break;
    case Kind::kLognormal:
      s << "lognormal:mean=" << format_double(mean) << ",sigma=" << format_double(sigma);
      if (max != 1000000) s << ",max=" << max;
      break;
  }
  return s.str();
}

int64_t LengthDist::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kFixed:
      return a;
    case Kind::kUniform:
      return rng.uniform_int(a, b);
    case Kind::kLognormal: {
      const double mu = std::log(mean) - 0.5 * sigma * sigma;
      const double x = std::round(std::exp(mu + sigma * rng.normal()));
      if (!(x < static_cast<double>(max))) return max;
      return static_cast<int64_t>(x);
    }
  }
  return a;
}

double LengthDist::expected() const {
  switch (kind) {
    case Kind::kFixed:
      return static_cast<double>(a);
    case Kind::kUniform:
      return 0.5 * static_cast<double>(a + b);
    case Kind::kLognormal:
      return mean;
  }
  return 0.0;
}

}  // namespace moe::sim
