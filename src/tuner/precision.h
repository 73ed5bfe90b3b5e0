#pragma once
/// The tuner's precision policy (issue 23). A parameter point may compute in a reduced precision (its
/// `precision` parameter: "tf32" for one TF32 tensor-core product, "tf32+bf16" for one TF32 product of the
/// operands' TF32 parts and one bf16 product of the cross terms, "bf16", "fp16") where the task asks
/// for fp32. It is kept only where its worst element used at most kReducedPrecisionShare of the task's
/// tolerance (a shape's `tolerance_used`: max |got - want| / (atol + rtol |want|)) on every shape and
/// seed it was checked on: in the search (2 seeds, the tuning shapes) and again in the final check (every
/// seed, the held-out shapes too). A pass with little to spare may be luck that another seed or shape
/// would not repeat. fp32-accurate points ("fp32", "3xtf32", or no `precision`) are kept on any pass, and so
/// is a half-precision task's point in its own type (`io` equal to `precision`: fp16 or bf16 operands and
/// output, accumulated in fp32).

#include <string>

#include <nlohmann/json.hpp>

#include "eval/verdict.h"
#include "tuner/templates.h"

namespace kfab {

inline constexpr double kReducedPrecisionShare = 0.25;

/// Whether the point computes in a reduced precision.
bool reduced_precision(const TemplateParams& p);

/// The largest `tolerance_used` over a verdict's correct shapes (its JSON `shapes`), or +inf where one
/// of them does not state it (no evidence of a margin). 0 without correct shapes.
double worst_tolerance_used(const nlohmann::json& shapes);
double worst_tolerance_used(const Verdict& v);

/// Empty where a point that passed may be kept; else why its precision is not (for the run's log and
/// the step's detail).
std::string precision_refusal(const TemplateParams& p, double worst);

/// The final check's verdict of a point whose precision the policy refused after it passed: `rejected`,
/// its detail saying why, so that nothing downstream (the run's best, a bench row, a table) counts it
/// as passed; its shapes and timings stay as measured.
Verdict refused_verdict(const Verdict& passed, const std::string& why);

}  // namespace kfab
