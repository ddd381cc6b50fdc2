-- Argo CD health check for deployctl's InferenceProfile (deployctl.dev/v1), in the format of
-- Argo CD's resource.customizations.health.<group>_<kind> (docs/gitops.md shows where it goes).
-- It reads the kstatus conditions the deployctl controller writes (orchestrator/controller/resource_status.py):
--   a status about an older generation, or Reconciling=True   -> Progressing
--   Stalled=True (a generation failed and is not retried)     -> Degraded, with the failure class
--   Ready=True (deployed, or an on-call manual rollback)      -> Healthy
--   Ready=False                                               -> Degraded
hs = {}
hs.status = "Progressing"
hs.message = "waiting for the deployctl controller"
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "the deployctl controller has not yet observed generation " .. tostring(obj.metadata.generation)
  return hs
end
local found = {}
for _, condition in ipairs(obj.status.conditions) do
  found[condition.type] = condition
end
local function text(condition)
  local message = condition.reason or ""
  if condition.message ~= nil and condition.message ~= "" then
    message = message .. ": " .. condition.message
  end
  return message
end
if found["Reconciling"] ~= nil and found["Reconciling"].status == "True" then
  hs.message = text(found["Reconciling"])
  return hs
end
local ready = found["Ready"]
if found["Stalled"] ~= nil and found["Stalled"].status == "True" then
  hs.status = "Degraded"
  hs.message = text(ready or found["Stalled"])
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = text(ready)
  return hs
end
if ready ~= nil and ready.status == "False" then
  hs.status = "Degraded"
  hs.message = text(ready)
  return hs
end
return hs
