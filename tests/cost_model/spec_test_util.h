// Test helper for the spec tests: runs a callable that must throw exception type E and
// checks that the message contains every given fragment (file, key path, value, expectation),
// printing the whole message when a fragment is missing.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace strata::testing {

template <typename E, typename F>
void expect_error(F&& f, const std::vector<std::string>& fragments) {
  try {
    f();
  } catch (const E& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "message lacks \"" << fragment << "\": " << message;
    }
    return;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return;
  }
  ADD_FAILURE() << "did not throw";
}

}  // namespace strata::testing
