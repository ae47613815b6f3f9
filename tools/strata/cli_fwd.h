// CLI11's classes named without its header, for the headers of tools/strata that only pass an
// App or an Option along. CLI11 (2.1, header-only) costs each file that includes it about 8 s
// of compile on a 2-core machine (its namespace-scope validators and inline functions are
// compiled again in every such file), so only the files that build options include it.
#pragma once

namespace CLI {
class App;
class Option;
}  // namespace CLI
