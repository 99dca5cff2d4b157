#include <gtest/gtest.h>

#include <map>

#include "olliesrv/settings.hpp"

using namespace ollie;

namespace {

p9::Env env_of(std::map<std::string, std::string> m) {
  return [m](std::string_view k) -> std::optional<std::string> {
    auto it = m.find(std::string(k));
    if (it == m.end() || it->second.empty()) return std::nullopt;
    return it->second;
  };
}

backend::BackendsConf conf_of(const std::string& text) { return backend::parse_backends_conf(text); }

struct Choice {
  std::string backend, model;
};

Choice choose(const SettingsInput& in, const std::string& conf = "", std::map<std::string, std::string> env = {}) {
  auto r = resolve_backend_choice(in, conf_of(conf), env_of(std::move(env)));
  EXPECT_TRUE(r) << r.ename();
  if (!r) return {};
  return {r->backend, r->model};
}

}  // namespace

// §4.3 backend row: backend= → profile → parent → session → backends.conf → OLLIE_BACKEND → error.
TEST(Settings, BackendResolutionOrder) {
  Profile prof;
  SettingsInput in;
  in.profile = &prof;
  const std::string conf = "backend = gemini\n";
  const std::map<std::string, std::string> env{{"OLLIE_BACKEND", "kiro"}};

  EXPECT_EQ(choose(in, "", env).backend, "kiro");
  EXPECT_EQ(choose(in, conf, env).backend, "gemini");
  in.session_backend = "openrouter";
  EXPECT_EQ(choose(in, conf, env).backend, "openrouter");
  in.parent_backend = "copilot";
  EXPECT_EQ(choose(in, conf, env).backend, "copilot");
  prof.backend = "openai";
  EXPECT_EQ(choose(in, conf, env).backend, "openai");
  in.backend = "ollama";
  EXPECT_EQ(choose(in, conf, env).backend, "ollama");
}

TEST(Settings, NoBackendAndUnknownBackend) {
  Profile prof;
  SettingsInput in;
  in.profile = &prof;
  auto r = resolve_backend_choice(in, {}, env_of({}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "no backend configured: set backend in backends.conf or OLLIE_BACKEND");
  in.backend = "gpt";
  r = resolve_backend_choice(in, {}, env_of({}));
  ASSERT_FALSE(r);
  EXPECT_EQ(r.ename(), "unknown backend: gpt (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)");
  in.backend.clear();
  prof.name = "mine";
  prof.backend = "nope";  // the profile's mistake: named as its other errors are
  EXPECT_EQ(resolve_backend_choice(in, {}, env_of({})).ename(),
            "agent profile mine: unknown backend: nope (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)");
  in.backend = "nope";  // the request's, whatever the profile says
  EXPECT_EQ(resolve_backend_choice(in, {}, env_of({})).ename(),
            "unknown backend: nope (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)");
}

// §4.3 model row, one rule at a time, from the bottom up.
TEST(Settings, ModelFallsBackToConfThenEnvThenBuiltIn) {
  Profile prof;
  SettingsInput in;
  in.profile = &prof;
  in.backend = "anthropic";  // no key is set: the model is still resolved
  EXPECT_EQ(choose(in).model, "claude-sonnet-4-5");
  EXPECT_EQ(choose(in, "", {{"OLLIE_MODEL", "m-env"}}).model, "m-env");
  EXPECT_EQ(choose(in, "[anthropic]\nmodel = m-conf\n", {{"OLLIE_MODEL", "m-env"}}).model, "m-conf");
  // Another backend's section does not count.
  EXPECT_EQ(choose(in, "[ollama]\nmodel = m-conf\n").model, "claude-sonnet-4-5");
  in.backend = "ollama";
  EXPECT_EQ(choose(in).model, "qwen3:8b");
}

TEST(Settings, SessionModelOnlyWithItsBackend) {
  Profile prof;
  SettingsInput in;
  in.profile = &prof;
  const std::string conf = "[ollama]\nmodel = m-conf\n[openai]\nmodel = o-conf\n";
  in.session_backend = "ollama";
  in.session_model = "s-model";
  EXPECT_EQ(choose(in, conf).model, "s-model");  // backend from the session, model too
  in.backend = "openai";
  EXPECT_EQ(choose(in, conf).model, "o-conf");  // written for ollama, not used with openai
  in.session_backend.clear();
  EXPECT_EQ(choose(in, conf).model, "s-model");  // a session naming no backend: used with any
}

TEST(Settings, ParentModelOnlyWithTheSameBackend) {
  Profile prof;
  SettingsInput in;
  in.profile = &prof;
  in.parent_backend = "ollama";
  in.parent_model = "p-model";
  in.session_model = "s-model";
  EXPECT_EQ(choose(in).backend, "ollama");
  EXPECT_EQ(choose(in).model, "p-model");  // parent's model wins over the session's
  in.backend = "gemini";
  EXPECT_EQ(choose(in).model, "s-model");  // other backend: the parent's model is skipped
}

TEST(Settings, ProfileModelOnlyWithItsBackendOrNone) {
  Profile prof;
  SettingsInput in;
  in.profile = &prof;
  in.parent_backend = "ollama";
  in.parent_model = "p-model";
  prof.model = "prof-model";
  EXPECT_EQ(choose(in).model, "prof-model");  // the profile names no backend: used
  prof.backend = "ollama";
  EXPECT_EQ(choose(in).model, "prof-model");  // names the resolved one: used
  in.backend = "gemini";
  EXPECT_EQ(choose(in).model, "gemini-2.5-flash");  // names another: skipped (and so is the parent's)
  in.model = "explicit";
  EXPECT_EQ(choose(in).model, "explicit");  // model= always wins
}

TEST(Settings, ParamKeysInCfgOrder) {
  EXPECT_EQ(param_keys(), (std::vector<std::string>{
                              "maxTokens", "maxCompletionTokens", "temperature", "topP", "topK", "minP",
                              "topA", "frequencyPenalty", "presencePenalty", "repetitionPenalty", "reasoning",
                              "reasoningEffort", "includeReasoning", "responseFormat", "stop", "verbosity"}));
}

TEST(Settings, ParseParamValidates) {
  EXPECT_EQ(*parse_param("temperature", "0.5"), "0.5");
  EXPECT_EQ(*parse_param("temperature", "1"), "1");
  EXPECT_EQ(*parse_param("temperature", "-.5"), "-0.5");
  EXPECT_EQ(parse_param("temperature", "abc").ename(), "invalid temperature: abc");
  EXPECT_EQ(parse_param("temperature", "nan").ename(), "invalid temperature: nan");
  EXPECT_EQ(parse_param("temperature", "1e999").ename(), "invalid temperature: 1e999");
  EXPECT_EQ(*parse_param("maxTokens", "4096"), "4096");
  EXPECT_EQ(parse_param("maxTokens", "-1").ename(), "invalid maxTokens: -1");
  EXPECT_EQ(parse_param("maxTokens", "1.5").ename(), "invalid maxTokens: 1.5");
  EXPECT_EQ(parse_param("reasoning", "99999999999").ename(), "invalid reasoning: 99999999999");
  EXPECT_EQ(*parse_param("topK", "-1"), "-1");
  EXPECT_EQ(*parse_param("reasoningEffort", "high"), "\"high\"");
  EXPECT_EQ(parse_param("reasoningEffort", "x").ename(), "invalid reasoningEffort: x (low, medium, high)");
  EXPECT_EQ(*parse_param("includeReasoning", "true"), "true");
  EXPECT_EQ(parse_param("includeReasoning", "yes").ename(), "invalid includeReasoning: yes");
  EXPECT_EQ(*parse_param("stop", R"(["\n\n","END"])"), R"(["\n\n","END"])");
  EXPECT_EQ(parse_param("stop", "END").ename(), "invalid stop: END");
  EXPECT_EQ(parse_param("stop", "[1]").ename(), "invalid stop: [1]");
  EXPECT_EQ(*parse_param("responseFormat", "json_object"), "\"json_object\"");
  EXPECT_EQ(parse_param("bogus", "1").ename(), "unknown key: bogus");
}

TEST(Settings, MergeOverlaysOverrides) {
  const std::string merged = merge_params(R"({"temperature":0.2,"reasoningEffort":"medium"})",
                                          R"({"temperature":0.5,"topK":40,"stop":null})");
  EXPECT_EQ(merged, R"({"reasoningEffort":"medium","temperature":0.5,"topK":40})");
  EXPECT_EQ(merge_params("not json", "{}"), "{}");
}

TEST(Settings, ToGenerationParams) {
  auto g = to_generation_params(
      R"({"maxTokens":0,"maxCompletionTokens":100,"temperature":0.2,"topK":40,"reasoning":2048,)"
      R"("reasoningEffort":"low","includeReasoning":true,"responseFormat":"json_object","stop":["END"],)"
      R"("verbosity":"high","repetitionPenalty":1.1})");
  EXPECT_FALSE(g.max_tokens);  // 0 = provider default
  EXPECT_EQ(g.max_completion_tokens, 100);
  EXPECT_EQ(g.temperature, 0.2);
  EXPECT_FALSE(g.top_p);
  EXPECT_EQ(g.top_k, 40);
  EXPECT_EQ(g.repetition_penalty, 1.1);
  EXPECT_EQ(g.reasoning, 2048);
  EXPECT_EQ(g.reasoning_effort, "low");
  EXPECT_EQ(g.include_reasoning, true);
  EXPECT_EQ(g.response_format, "json");
  EXPECT_EQ(g.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(g.verbosity, "high");
  EXPECT_EQ(to_generation_params(R"({"responseFormat":"text"})").response_format, "");
}

TEST(Settings, RenderCfgAllKeysInOrder) {
  CfgView v;
  v.backend = "anthropic";
  v.model = "claude-sonnet-4-5";
  v.profile = "default";
  v.params = R"({"temperature":0.2,"stop":["\n\n","END"],"includeReasoning":false,"reasoningEffort":"medium","maxTokens":100})";
  EXPECT_EQ(render_cfg(v),
            "backend=anthropic\n"
            "model=claude-sonnet-4-5\n"
            "agent=default\n"
            "cwd=\n"
            "maxTokens=100\n"
            "maxCompletionTokens=\n"
            "temperature=0.2\n"
            "topP=\n"
            "topK=\n"
            "minP=\n"
            "topA=\n"
            "frequencyPenalty=\n"
            "presencePenalty=\n"
            "repetitionPenalty=\n"
            "reasoning=\n"
            "reasoningEffort=medium\n"
            "includeReasoning=false\n"
            "responseFormat=\n"
            "stop=[\"\\n\\n\",\"END\"]\n"
            "verbosity=\n");
  v.cwd_override = "/tmp/x";
  EXPECT_NE(render_cfg(v).find("\ncwd=/tmp/x\n"), std::string::npos);
}

TEST(Settings, CfgWriteParsedInApplicationOrder) {
  auto w = parse_cfg_write("temperature=0.5 stop='[\"END\"]' cwd=/src model=m backend=ollama agent=review topK=");
  ASSERT_TRUE(w) << w.ename();
  EXPECT_EQ(w->profile, "review");
  EXPECT_EQ(w->backend, "ollama");
  EXPECT_EQ(w->model, "m");
  EXPECT_EQ(w->cwd, "/src");
  ASSERT_EQ(w->params.size(), 3u);
  EXPECT_EQ(w->params[0].first, "temperature");
  EXPECT_EQ(w->params[0].second, "0.5");
  EXPECT_EQ(w->params[1].first, "topK");
  EXPECT_EQ(w->params[1].second, std::nullopt);  // empty = drop the override
  EXPECT_EQ(w->params[2].first, "stop");
  EXPECT_EQ(w->params[2].second, R"(["END"])");
  auto unset = parse_cfg_write("model=\ncwd=\n");
  ASSERT_TRUE(unset);
  EXPECT_EQ(unset->model, "");
  EXPECT_EQ(unset->cwd, "");
  EXPECT_FALSE(unset->backend);
  EXPECT_FALSE(unset->profile);
}

TEST(Settings, CfgWriteErrorsRejectTheWholeWrite) {
  EXPECT_EQ(parse_cfg_write("temperature=0.5 topP=abc").ename(), "invalid topP: abc");
  EXPECT_EQ(parse_cfg_write("reasoningEffort=x").ename(), "invalid reasoningEffort: x (low, medium, high)");
  EXPECT_EQ(parse_cfg_write("temperature").ename(), "bad token: temperature");
  EXPECT_EQ(parse_cfg_write("color=red").ename(), "unknown key: color");
  EXPECT_EQ(parse_cfg_write("model=a model=b").ename(), "duplicate key: model");
  EXPECT_EQ(parse_cfg_write("cwd='/a b").ename(), "unterminated quote");
  EXPECT_EQ(parse_cfg_write("prompt=hi").ename(), "unknown key: prompt");
  EXPECT_EQ(parse_cfg_write("backend=gpt").ename(),
            "unknown backend: gpt (ollama, openai, openrouter, anthropic, copilot, kiro, gemini)");
}
