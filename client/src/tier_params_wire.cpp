#include "tier_params_wire.hpp"

#include "kvtier/protocol/tier_param_table.hpp"

namespace kvtier::client {

void set_tiering(wire::TierParams::Builder t, const kvtier_sequence_options& o) {
  t.setUseDefaults(o.use_defaults != 0);
  t.setKeyDigestDim(o.key_digest_dim);
  t.setTokensPerPosition(o.tokens_per_position);
  if (o.use_defaults != 0) return;
#define KVTIER_TO_WIRE(name, Wire, Type, value, range, help) t.set##Wire(o.name);
  KVTIER_TIER_NUMBERS(KVTIER_TO_WIRE)
#undef KVTIER_TO_WIRE
  t.setMode(static_cast<wire::EvictionMode>(o.mode));
  t.setPolicy(static_cast<wire::Policy>(o.policy));
  t.setProtectPrompt(o.protect_prompt < 0    ? wire::PromptProtection::POLICY_DEFAULT
                     : o.protect_prompt == 0 ? wire::PromptProtection::UNPROTECTED
                                             : wire::PromptProtection::PROTECT);
}

}  // namespace kvtier::client
