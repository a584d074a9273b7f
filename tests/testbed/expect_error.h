// Checks that a call raises the typed cakemoe error that names the expected argument.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "cakemoe/errors.h"

namespace cakemoe {
namespace testbed {

/// Expects fn() to throw InvalidArgument (Unsupported when `unsupported`) naming `argument`.
template <typename Fn>
void expect_error(Fn fn, const std::string& argument, bool unsupported = false) {
  try {
    fn();
    ADD_FAILURE() << "no error for " << argument;
  } catch (const Unsupported& e) {
    EXPECT_TRUE(unsupported) << e.what();
    EXPECT_EQ(e.argument(), argument) << e.what();
  } catch (const InvalidArgument& e) {
    EXPECT_FALSE(unsupported) << e.what();
    EXPECT_EQ(e.argument(), argument) << e.what();
  }
}

}  // namespace testbed
}  // namespace cakemoe
